import pickle

from stream_plugin.reading.cursor import EpochCursor, Handoff, IterationPlan, Position
from stream_plugin.reading.state import ResumeState

G = 8
EPOCH = 96  # samples in an epoch, for these tests


def saved(epoch: int, sample: int, batch_size: int = G) -> ResumeState:
    """A resume state as a checkpoint would hold it."""
    return ResumeState(
        epoch=epoch,
        sample_in_epoch=sample,
        epoch_batch_size=batch_size,
        num_canonical_nodes=2,
        shuffle_seed=1,
        fingerprint="f",
    )


def begin(cursor: EpochCursor) -> IterationPlan:
    return cursor.begin(global_batch_size=G, num_canonical_nodes=2)


def position(cursor: EpochCursor, num_samples: int) -> Position:
    return cursor.position(num_samples, True, global_batch_size=G, num_canonical_nodes=2)


def test_passes_run_to_their_end_advance_the_epoch() -> None:
    cursor = EpochCursor()
    first = begin(cursor)
    cursor.end(first)
    assert begin(cursor).epoch == first.epoch + 1 == 1


def test_an_abandoned_pass_keeps_its_position_and_the_next_pass_is_the_next_epoch() -> None:
    cursor = EpochCursor()
    plan = begin(cursor)
    assert position(cursor, 24) == Position(plan, 24)
    assert begin(cursor).epoch == 1


def test_zero_samples_between_epochs_is_the_next_epoch_not_a_replay() -> None:
    cursor = EpochCursor()
    cursor.end(begin(cursor))
    found = position(cursor, 0)
    assert (found.plan.epoch, found.consumed) == (1, 0)


def test_a_count_after_a_finished_pass_is_a_position_in_that_epoch() -> None:
    cursor = EpochCursor()
    plan = begin(cursor)
    cursor.end(plan)
    assert position(cursor, EPOCH) == Position(plan, EPOCH)  # Composer's save on the last batch


def test_a_pending_state_is_described_with_its_own_batch_size() -> None:
    cursor = EpochCursor()
    state = saved(1, 0, 4)
    cursor.load(state)
    found = position(cursor, 12)
    assert (found.plan.epoch, found.plan.epoch_batch_size, found.consumed) == (1, 4, 12)


def test_an_epoch_loaded_at_sample_zero_is_planned_with_todays_batch_size() -> None:
    cursor = EpochCursor()
    cursor.load(saved(1, 0, 4))
    assert begin(cursor) == IterationPlan(1, 0, G, 2)


def test_a_loaded_state_is_reported_until_a_pass_applies_it_once() -> None:
    cursor = EpochCursor()
    state = saved(3, 16)
    cursor.load(state)
    assert position(cursor, 0) == Position(IterationPlan(3, 0, G, 2), 16)  # the state's epoch and count
    assert begin(cursor) == IterationPlan(3, 16, G, 2)
    assert begin(cursor) == IterationPlan(4, 0, G, 2)


def test_workers_start_with_the_loaders_plan_then_advance_one_epoch_per_pass() -> None:
    cursor = EpochCursor()
    cursor.load(saved(2, 40))
    cursor.handoff = Handoff(begin(cursor))
    worker = pickle.loads(pickle.dumps(cursor))
    assert worker.plan_in_worker(global_batch_size=G, num_canonical_nodes=2) == IterationPlan(2, 40, G, 2)
    assert worker.plan_in_worker(global_batch_size=G, num_canonical_nodes=2) == IterationPlan(3, 0, G, 2)


def test_the_main_process_takes_the_loaders_plan_once() -> None:
    cursor = EpochCursor()
    plan = begin(cursor)
    cursor.handoff = Handoff(plan)
    assert cursor.plan_in_main_process(global_batch_size=G, num_canonical_nodes=2) == plan
    assert cursor.plan_in_main_process(global_batch_size=G, num_canonical_nodes=2).epoch == 1


def test_set_epoch_forgets_loaded_state() -> None:
    cursor = EpochCursor()
    cursor.load(saved(5, 8))
    cursor.set_epoch(2)
    assert begin(cursor) == IterationPlan(2, 0, G, 2)
