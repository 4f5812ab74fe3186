"""The one resume-test helper: what a run read before a checkpoint, plus what it reads after restoring it,
must be exactly what an uninterrupted run reads (Grain's ``assert_equal_output_after_checkpoint``).

Two layers, so that the rule lives in one place:

- ``assert_same_output(found, expected)`` is the rule itself: the same steps in the same order, no id
  missing, none read twice. Every resume test calls it, directly or through the helpers below: the
  dataset and order tests, and the Lightning and Composer tests, whose "readers" are Trainer runs
  (often subprocesses) that record the sample ids of every step in files. On failure it names the first
  differing step and counts the missing and the duplicated ids. ``assert_continues(before, after,
  expected)`` is the same call spelled as "before the checkpoint + after it".
- ``assert_resumes_identically(makers, cuts)`` drives stateful iterables (a ``StreamingDataLoader``, a
  list of them for several ranks, or anything iterable with a way to save and restore its position):
  read a fresh reader up to a cut, save its state, load it into a fresh reader of the next layout
  (another worker or rank count, another batch size), read on, and compare the joined output with the
  uninterrupted run.

A step is one unit of output: a sample id, a batch (a list of ids), or a trainer's record of one step.
"""

from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

Batches = list[list[int]]
Step = Any  # a sample id, a list of ids, END_OF_PASS, or a trainer's record (compared with ==)
IdsOf = Callable[[Step], Iterable[int]]

END_OF_PASS = "end of pass"
"""The step ``assert_resumes_identically`` records where a pass (an epoch) over a reader ended, so that
epoch boundaries must match too."""

SHOWN_IDS = 8  # how many of the missing or duplicated ids a failure message lists
SHOWN_CHARS = 160  # how much of a differing step a failure message shows


class Resumable(Protocol):
    """A reader whose every ``iter()`` is one pass, and whose position survives a state round trip."""

    def __iter__(self) -> Iterator[Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


Maker = Callable[[], Resumable | Sequence[Resumable]]  # a fresh reader, or one per rank (in rank order)


def batch_ids(batch: Any) -> list[int]:
    """The sample ids of one collated batch: its ``id`` column."""
    return [int(i) for i in batch["id"]]


def take_ids(loader: Iterable[Any], count: int | None = None) -> Batches:
    """The id lists of the first ``count`` batches of one pass (all of them if None)."""
    batches: Batches = []
    for batch in loader:
        batches.append(batch_ids(batch))
        if count is not None and len(batches) == count:
            break
    return batches


def run_epochs(loader: Iterable[Any], epochs: int) -> list[Batches]:
    """The id lists of ``epochs`` whole passes, one list per pass."""
    return [take_ids(loader) for _ in range(epochs)]


def step_ids(step: Step) -> list[int]:
    """The sample ids in one step: a sample id, or a sequence of them; none in ``END_OF_PASS``."""
    if isinstance(step, str):
        return []
    if isinstance(step, numbers.Integral):
        return [int(step)]
    return [int(i) for i in step]


def assert_same_output(
    found: Sequence[Step],
    expected: Sequence[Step],
    *,
    what: str = "the resumed run",
    ids: IdsOf = step_ids,
    ordered: bool = True,
    checkpoints: Sequence[int] = (),
) -> None:
    """The rule: ``found`` is exactly ``expected``, the uninterrupted run's output, step for step.

    ``ordered=False`` compares only the ids each side read, as multisets: for a resume that regroups
    the samples (another global batch size). ``checkpoints`` are the step counts at which ``found``
    was saved and restored, so that the message says which segment went wrong. The message names the
    first differing step and counts the missing ids and the duplicated ones (read more often than in
    the uninterrupted run).
    """
    position = _first_difference(found, expected) if ordered else None
    if ordered and position is None:
        return
    found_ids = Counter(i for step in found for i in ids(step))
    expected_ids = Counter(i for step in expected for i in ids(step))
    if not ordered and found_ids == expected_ids:
        return
    missing, duplicated = expected_ids - found_ids, found_ids - expected_ids
    if position is not None:
        where = (
            f"at step {position}{_segment(position, checkpoints)}: expected {_show(expected, position)}, "
            f"found {_show(found, position)} ({len(found)} steps, expected {len(expected)})"
        )
    else:
        where = "in the ids read, whatever their order"
    if missing or duplicated:
        counts = f"{_count(missing, 'missing')}, {_count(duplicated, 'duplicated')}"
    elif [i for step in found for i in ids(step)] == [i for step in expected for i in ids(step)]:
        counts = "the same ids in the same order, split into steps or passes differently"
    else:
        counts = "no id missing or duplicated: the same ids reordered"
    raise AssertionError(f"{what} differs from the uninterrupted run {where}; {counts}")


def assert_continues(
    before: Sequence[Step], after: Sequence[Step], expected: Sequence[Step], **options: Any
) -> None:
    """``before`` (read up to the checkpoint) + ``after`` (read once restored) == ``expected``.

    ``assert_same_output`` on the joined steps, told where the checkpoint was; ``options`` go to it.
    """
    assert_same_output([*before, *after], expected, checkpoints=[len(before)], **options)


def assert_resumes_identically(
    makers: Sequence[Maker],
    cuts: Iterable[int | Sequence[int]],
    *,
    epochs: int = 1,
    expected: Sequence[Step] | None = None,
    read: Callable[[Any], list[int]] = batch_ids,
    save: Callable[[Any], Any] = lambda reader: reader.state_dict(),
    restore: Callable[[Any, Any], None] = lambda reader, state: reader.load_state_dict(state),
    flatten: bool = False,
) -> list[list[list[Step]]]:
    """Interrupt and resume at every cut; the joined output must be the uninterrupted run's.

    Each trial in ``cuts`` gives, for every maker but the last, how many steps to read (an int when
    there are two makers). ``makers[0]()`` reads ``cut[0]`` steps and saves its state; ``makers[1]()``
    loads it and reads ``cut[1]`` steps; ...; the last reads on until ``epochs`` passes are over. A
    maker may return one reader per rank: a step is then their batches joined in rank order. Cuts
    count steps across passes (a cut equal to a pass's length stops on its last batch, before the
    pass is seen to end). ``read`` turns one batch into its ids; ``save`` and ``restore`` take a
    reader's state and give it to a fresh one (by default ``state_dict`` and ``load_state_dict``).

    The joined steps, with ``END_OF_PASS`` where each pass ended, must equal ``expected`` (default:
    ``makers[0]()`` read uninterrupted), through ``assert_same_output``; ``flatten`` compares the ids
    in order instead of the steps, for layouts that change the batch size. Returns every trial's
    segments (the steps each maker read, ``END_OF_PASS`` left out) for checks of the caller's own.
    """
    if expected is None:
        expected = _read(_open(makers[0], None, restore), None, epochs, read)[0]
    reference = _flat(expected) if flatten else list(expected)
    results = []
    for cut in cuts:
        trial = (cut,) if isinstance(cut, int) else tuple(cut)
        if len(trial) != len(makers) - 1:
            raise ValueError(
                f"expected {len(makers) - 1} cuts per trial for {len(makers)} makers, found {trial}"
            )
        segments: list[list[Step]] = []
        state, passes_left = None, epochs
        for maker, count in zip(makers, [*trial, None], strict=True):
            readers = _open(maker, state, restore)
            steps, passes_done = _read(readers, count, passes_left, read)
            segments.append(steps)
            state, passes_left = save(readers[0]), passes_left - passes_done
            assert all(save(other) == state for other in readers[1:]), "ranks saved different states"
        joined = [step for steps in segments for step in steps]
        boundaries = [sum(len(steps) for steps in segments[: k + 1]) for k in range(len(segments) - 1)]
        if flatten:
            boundaries = [len(_flat(joined[:boundary])) for boundary in boundaries]
            joined = _flat(joined)
        what = f"the run resumed after {list(trial)} steps"
        assert_same_output(joined, reference, what=what, checkpoints=boundaries)
        results.append([[step for step in steps if step != END_OF_PASS] for steps in segments])
    return results


def _open(maker: Maker, state: Any, restore: Callable[[Any, Any], None]) -> list[Resumable]:
    """A fresh reader, or one per rank, each restored from ``state`` unless it is None."""
    made = maker()
    readers = list(made) if isinstance(made, Sequence) else [made]
    if state is not None:
        for reader in readers:
            restore(reader, state)
    return readers


def _read(
    readers: Sequence[Resumable], count: int | None, passes: int, read: Callable[[Any], list[int]]
) -> tuple[list[Step], int]:
    """Up to ``count`` steps (no limit if None) over at most ``passes`` passes; (steps, passes ended)."""
    steps: list[Step] = []
    taken = ended = 0
    while ended < passes and (count is None or taken < count):
        iterators = [iter(reader) for reader in readers]
        while count is None or taken < count:
            shares = [next(iterator, END_OF_PASS) for iterator in iterators]
            finished = [isinstance(share, str) and share == END_OF_PASS for share in shares]
            if any(finished):
                assert all(finished), f"ranks ended a pass at different steps: {finished} after {taken} steps"
                steps.append(END_OF_PASS)
                ended += 1
                break
            steps.append([i for share in shares for i in read(share)])
            taken += 1
    return steps, ended


def _flat(steps: Sequence[Step]) -> list[Step]:
    """Every step's ids in order, ``END_OF_PASS`` markers kept."""
    return [item for step in steps for item in ([step] if isinstance(step, str) else step_ids(step))]


def _first_difference(found: Sequence[Step], expected: Sequence[Step]) -> int | None:
    if list(found) == list(expected):
        return None
    for position, (mine, theirs) in enumerate(zip(found, expected, strict=False)):
        if mine != theirs:
            return position
    return None if len(found) == len(expected) else min(len(found), len(expected))


def _segment(position: int, checkpoints: Sequence[int]) -> str:
    if not checkpoints:
        return ""
    before = [point for point in checkpoints if point <= position]
    if not before:
        return ", before the first checkpoint"
    return f", {position - before[-1]} steps after restoring checkpoint {len(before)} of {len(checkpoints)}"


def _show(steps: Sequence[Step], position: int) -> str:
    if position >= len(steps):
        return "nothing (the run had ended)"
    text = repr(steps[position])
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}..."


def _count(ids: Counter[int], kind: str) -> str:
    total = sum(ids.values())
    if not total:
        return f"0 ids {kind}"
    shown = sorted(ids)[:SHOWN_IDS]
    more = ", ..." if len(ids) > SHOWN_IDS else ""
    return f"{total} id{'s' if total != 1 else ''} {kind} ({', '.join(map(str, shown))}{more})"
