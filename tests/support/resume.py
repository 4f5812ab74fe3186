"""``assert_resumes_identically``: the one helper every stateful piece is checked with.

Run a reference pass, then for each cut point k: run a fresh object to k batches, save its state,
load it into another fresh object (possibly with other settings), and assert the rest of the
sequence is exactly the reference's rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

Batches = list[list[int]]


def take_ids(loader: Iterable[Any], count: int | None = None) -> Batches:
    """The id lists of the first ``count`` batches of one pass (all of them if None)."""
    batches: Batches = []
    for batch in loader:
        batches.append([int(i) for i in batch["id"]])
        if count is not None and len(batches) == count:
            break
    return batches


def run_epochs(loader: Iterable[Any], epochs: int) -> list[Batches]:
    return [take_ids(loader) for _ in range(epochs)]


def assert_resumes_identically(
    make_first: Callable[[], Any],
    make_resumed: Callable[[], Any],
    *,
    cuts: Sequence[int],
    epochs: int = 2,
    cut_epoch: int = 0,
) -> None:
    """For each cut, stop ``make_first()`` after ``cut`` batches of epoch ``cut_epoch`` and resume.

    The resumed object must yield exactly the reference's remaining batches of that epoch, then
    the reference's later epochs. Loaders must offer state_dict() / load_state_dict().
    """
    reference = run_epochs(make_first(), epochs)
    for cut in cuts:
        first = make_first()
        for _ in range(cut_epoch):
            take_ids(first)
        head = take_ids(first, cut) if cut else []
        assert head == reference[cut_epoch][:cut], f"cut {cut}: the first run diverged before the cut"
        state = first.state_dict()
        resumed = make_resumed()
        resumed.load_state_dict(state)
        rest = take_ids(resumed)
        assert rest == reference[cut_epoch][cut:], f"cut {cut}: the resumed epoch differs"
        for later in range(cut_epoch + 1, epochs):
            assert take_ids(resumed) == reference[later], f"cut {cut}: epoch {later} after the resume differs"
