"""The shared resume-test helper (``support.resume``) fails on every way a resume can go wrong.

Its readers here are small in-memory loaders, one of which resumes wrongly on purpose.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.resume import (
    END_OF_PASS,
    assert_continues,
    assert_resumes_identically,
    assert_same_output,
)

REFERENCE = [[0, 1], [2, 3], [4, 5], [6, 7]]


class ListLoader:
    """Global batches of 4 over ids 0..15, rotated each epoch; rank ``rank`` of ``ranks`` gets its slice.

    The state is (epoch, batches taken); ``resume_shift`` moves a restored position on by that many
    batches, a broken resume (1 skips a batch, -1 reads one twice).
    """

    def __init__(self, *, rank: int = 0, ranks: int = 1, resume_shift: int = 0) -> None:
        self.rank, self.ranks, self.resume_shift = rank, ranks, resume_shift
        self.epoch, self.batches = 0, 0

    def __iter__(self) -> Iterator[dict[str, list[int]]]:
        ids = list(range(16))
        ids = ids[self.epoch :] + ids[: self.epoch]  # rotated: each epoch's order differs
        rows = [ids[start : start + 4] for start in range(0, 16, 4)]
        share = 4 // self.ranks
        while self.batches < len(rows):
            row = rows[self.batches]
            self.batches += 1
            yield {"id": row[self.rank * share : (self.rank + 1) * share]}
        self.epoch, self.batches = self.epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.batches = state["epoch"], max(0, state["batches"] + self.resume_shift)


def test_identical_output_passes() -> None:
    assert_same_output([list(batch) for batch in REFERENCE], REFERENCE)
    assert_continues(REFERENCE[:1], REFERENCE[1:], REFERENCE)


def test_a_duplicated_id_is_named_and_counted() -> None:
    with pytest.raises(
        AssertionError,
        match=r"at step 3, 1 steps after restoring checkpoint 1 of 1: expected \[6, 7\], found \[6, 7, 7\] "
        r"\(4 steps, expected 4\); 0 ids missing, 1 id duplicated \(7\)$",
    ):
        assert_continues(REFERENCE[:2], [[4, 5], [6, 7, 7]], REFERENCE)


def test_a_missing_id_is_named_and_counted() -> None:
    with pytest.raises(
        AssertionError,
        match=r"at step 1, 0 steps after restoring checkpoint 1 of 1: expected \[2, 3\], found \[2\] .*"
        r"1 id missing \(3\), 0 ids duplicated$",
    ):
        assert_continues(REFERENCE[:1], [[2], [4, 5], [6, 7]], REFERENCE)


def test_a_reordering_is_named() -> None:
    with pytest.raises(AssertionError, match=r"at step 2, .*no id missing or duplicated: the same ids reordered"):
        assert_continues(REFERENCE[:2], [[5, 4], [6, 7]], REFERENCE)


def test_a_divergence_before_the_checkpoint_is_named() -> None:
    with pytest.raises(AssertionError, match=r"at step 0, before the first checkpoint"):
        assert_continues([[1, 0]], REFERENCE[1:], REFERENCE)


def test_a_run_that_ends_early_or_late_is_named() -> None:
    with pytest.raises(
        AssertionError, match=r"found nothing \(the run had ended\) \(3 steps, expected 4\); 2 ids missing \(6, 7\)"
    ):
        assert_same_output(REFERENCE[:3], REFERENCE)
    with pytest.raises(AssertionError, match=r"expected nothing \(the run had ended\), found \[6, 7\]"):
        assert_same_output([*REFERENCE, [6, 7]], REFERENCE)


def test_other_step_boundaries_are_named_and_unordered_comparison_accepts_them() -> None:
    regrouped = [[0, 1, 2], [3, 4, 5, 6], [7]]
    with pytest.raises(AssertionError, match="the same ids in the same order, split into steps or passes"):
        assert_same_output(regrouped, REFERENCE)
    assert_same_output(regrouped, REFERENCE, ordered=False)
    with pytest.raises(
        AssertionError, match=r"in the ids read, whatever their order; 0 ids missing, 1 id duplicated \(7\)"
    ):
        assert_same_output([*regrouped, [7]], REFERENCE, ordered=False)


def test_trainer_records_compare_through_their_own_ids() -> None:
    history = [[0, 10, 11], [0, 12, 13], [1, 13, 12]]  # Composer's [epoch, *ids]
    with pytest.raises(AssertionError, match=r"1 id missing \(11\), 1 id duplicated \(13\)"):
        assert_same_output([[0, 10, 13], *history[1:]], history, ids=lambda batch: batch[1:])


def test_a_correct_resume_passes_at_every_cut_across_epochs_and_rank_counts() -> None:
    one_rank = ListLoader
    trials = assert_resumes_identically([one_rank, one_rank], cuts=range(9), epochs=2)
    assert [len(segment) for segment in trials[5]] == [5, 3]  # 8 batches in all, cut after 5
    two_ranks = lambda: [ListLoader(rank=rank, ranks=2) for rank in range(2)]  # noqa: E731
    assert_resumes_identically([two_ranks, one_rank, two_ranks], cuts=[(1, 2), (4, 0), (3, 5)], epochs=2)


def test_a_resume_that_skips_or_repeats_a_batch_fails() -> None:
    skips = lambda: ListLoader(resume_shift=1)  # noqa: E731
    with pytest.raises(
        AssertionError,
        match=r"resumed after \[2\] steps differs from the uninterrupted run at step 2, 0 steps after "
        r"restoring checkpoint 1 of 1: .*4 ids missing \(8, 9, 10, 11\), 0 ids duplicated$",
    ):
        assert_resumes_identically([ListLoader, skips], cuts=[2], epochs=2)
    repeats = lambda: ListLoader(resume_shift=-1)  # noqa: E731
    with pytest.raises(AssertionError, match=r"at step 2, .*0 ids missing, 4 ids duplicated \(4, 5, 6, 7\)$"):
        assert_resumes_identically([ListLoader, repeats], cuts=[2], epochs=2)


def test_epoch_boundaries_are_part_of_the_output() -> None:
    class NoEpochEnd(ListLoader):
        """Restored at the end of a pass, it starts the next pass without ending this one."""

        def load_state_dict(self, state: dict[str, Any]) -> None:
            super().load_state_dict(state)
            if self.batches == 4:
                self.epoch, self.batches = self.epoch + 1, 0

    with pytest.raises(AssertionError, match=f"at step 4, .*expected '{END_OF_PASS}'"):
        assert_resumes_identically([ListLoader, NoEpochEnd], cuts=[4], epochs=2)


def test_flatten_compares_ids_across_other_batch_sizes() -> None:
    class Halves(ListLoader):
        """The same order in batches of 2, resumed from a position counted in batches of 4."""

        def __iter__(self) -> Iterator[dict[str, list[int]]]:
            for batch in super().__iter__():
                yield {"id": batch["id"][:2]}
                yield {"id": batch["id"][2:]}

    assert_resumes_identically([ListLoader, Halves], cuts=[1, 3], epochs=2, flatten=True)
    with pytest.raises(AssertionError, match="split into steps or passes differently"):
        assert_resumes_identically([ListLoader, Halves], cuts=[1], epochs=2)


def test_save_and_restore_may_be_any_pair_of_functions() -> None:
    positions: list[tuple[int, int]] = []

    def save(loader: ListLoader) -> tuple[int, int]:
        positions.append((loader.epoch, loader.batches))
        return positions[-1]

    def restore(loader: ListLoader, position: tuple[int, int]) -> None:
        loader.epoch, loader.batches = position

    assert_resumes_identically([ListLoader, ListLoader], cuts=[6], epochs=2, save=save, restore=restore)
    assert positions[0] == (1, 2)  # the first run's position when it was saved

    def restore_one_batch_late(loader: ListLoader, position: tuple[int, int]) -> None:
        restore(loader, (position[0], position[1] + 1))

    with pytest.raises(AssertionError, match=r"4 ids missing \(9, 10, 11, 12\), 0 ids duplicated$"):
        assert_resumes_identically(
            [ListLoader, ListLoader], cuts=[6], epochs=2, save=save, restore=restore_one_batch_late
        )
