"""stream_plugin.preemption on its own: real signals, real processes, real gloo process groups."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from support.slurm import fake_scontrol

from stream_plugin.errors import ConfigError
from stream_plugin.preemption import (
    DEFAULT_EXIT_CODE,
    AgreementSchedule,
    Preempted,
    PreemptionFlag,
    PreemptionStop,
    WorkerSignalGuard,
    agree_on_signal,
    default_preemption_signals,
)

pytestmark = pytest.mark.timeout(180)


def run_python(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_ranks(script: str, store: str, world: int, *args: str) -> list[tuple[int, str, str]]:
    """``(exit status, stdout, stderr)`` of ``world`` processes running ``script`` with argv
    ``store rank *args``, started together (they form one gloo process group through ``store``)."""
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script), store, str(rank), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    outputs = [rank.communicate(timeout=120) for rank in ranks]
    return [(rank.returncode, out, err) for rank, (out, err) in zip(ranks, outputs, strict=True)]


# ---------------------------------------------------------------------------------------- the flag
def test_the_flag_records_the_first_signal_and_puts_the_handlers_back() -> None:
    before = signal.getsignal(signal.SIGUSR1)
    flag = PreemptionFlag([signal.SIGTERM, signal.SIGUSR1])
    assert flag.install() and flag.installed
    os.kill(os.getpid(), signal.SIGUSR1)
    os.kill(os.getpid(), signal.SIGTERM)  # recorded first-wins: the first one stays
    assert flag.received == signal.SIGUSR1
    flag.uninstall()
    assert not flag.installed
    assert signal.getsignal(signal.SIGUSR1) == before
    flag.clear()
    assert flag.received == 0


def test_the_flag_is_not_installed_outside_the_main_thread() -> None:
    before = signal.getsignal(signal.SIGTERM)
    results: list[bool] = []
    thread = threading.Thread(target=lambda: results.append(PreemptionFlag([signal.SIGTERM]).install()))
    thread.start()
    thread.join()
    assert results == [False]
    assert signal.getsignal(signal.SIGTERM) == before


def test_default_preemption_signals_add_sigusr1_only_under_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert default_preemption_signals() == [signal.SIGTERM]
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert default_preemption_signals() == [signal.SIGTERM, signal.SIGUSR1]
    assert DEFAULT_EXIT_CODE == 143


def test_ignore_further_keeps_a_sigterm_during_shutdown_from_changing_the_exit_code() -> None:
    # What a launcher's clean-up SIGTERM does to a rank that is already exiting.
    script = """
        import atexit, os, signal, sys
        from stream_plugin.preemption import PreemptionFlag
        flag = PreemptionFlag([signal.SIGTERM])
        flag.install()
        if sys.argv[1] == "ignore":
            flag.ignore_further()
        else:
            flag.uninstall()
        atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))
        raise SystemExit(143)
    """
    assert run_python(script, "ignore").returncode == 143
    assert run_python(script, "restore").returncode == -signal.SIGTERM  # why ignore_further exists


# ---------------------------------------------------------------------------------------- agreement
def test_agree_on_signal_without_a_process_group_returns_this_process_flag() -> None:
    assert agree_on_signal(0) == 0
    assert agree_on_signal(signal.SIGTERM) == signal.SIGTERM


# Every rank runs steps of 0.2 s and agrees after each one; the rank named by argv[4] sends itself a
# real SIGTERM while step 3 runs. Each rank prints the step at which it stopped.
AGREEMENT_LOOP = """
    import os, signal, sys, time
    import torch.distributed as dist
    from stream_plugin.preemption import PreemptionFlag, agree_on_signal

    store, rank, world, signalled = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    flag = PreemptionFlag([signal.SIGTERM])
    flag.install()
    for step in range(100):
        if rank == signalled and step == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        agreed = agree_on_signal(flag.received)
        if agreed:
            print(f"stopped at step {step} by signal {agreed}; own flag {flag.received}", flush=True)
            break
    dist.destroy_process_group()
"""


@pytest.mark.slow
def test_per_step_agreement_stops_every_rank_at_the_step_one_rank_was_signalled(tmp_path: Path) -> None:
    world, signalled = 2, 1  # a non-zero rank: rank 0 itself knows nothing
    results = run_ranks(AGREEMENT_LOOP, str(tmp_path / "store"), world, str(world), str(signalled))
    for rank, (status, out, err) in enumerate(results):
        assert status == 0, err[-3000:]
        own = signal.SIGTERM if rank == signalled else 0
        assert out.strip() == f"stopped at step 3 by signal {int(signal.SIGTERM)}; own flag {int(own)}"


# Steps of 50 ms and an agreement about every 0.4 s; rank 1 sends itself a real SIGTERM as step 20
# starts. Each rank prints the steps at which it agreed, then the step at which it stopped.
SCHEDULED_LOOP = """
    import os, signal, sys, time
    import torch.distributed as dist
    from stream_plugin.preemption import AgreementSchedule, PreemptionFlag

    store, rank = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    flag, schedule, agreed_at = PreemptionFlag([signal.SIGTERM]), AgreementSchedule(0.4), []
    flag.install()
    for step in range(400):
        if rank == 1 and step == 20:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        if schedule.due(step):
            agreed_at.append(step)
            if schedule.agree(step, flag.received):
                break
    print(*agreed_at, flush=True)
    dist.destroy_process_group()
"""


@pytest.mark.slow
def test_agreement_schedule_spaces_agreements_by_time_and_all_ranks_pick_the_same_steps(
    tmp_path: Path,
) -> None:
    results = run_ranks(SCHEDULED_LOOP, str(tmp_path / "store"), 2)
    for status, _, err in results:
        assert status == 0, err[-3000:]
    agreed_at = [[int(step) for step in out.split()] for _, out, _ in results]
    assert agreed_at[0] == agreed_at[1]  # the same collective calls on both ranks: no deadlock
    steps = agreed_at[0]
    assert steps[:2] == [0, 1]  # the first two agreements measure the step time
    assert max(b - a for a, b in zip(steps, steps[1:], strict=False)) > 1  # then spaced by time
    assert steps[-2] < 20 <= steps[-1]  # the first agreement at or after the signal stops every rank


def test_agreement_schedule_without_a_process_group_agrees_every_step_of_a_slow_loop() -> None:
    schedule = AgreementSchedule(0.0)
    assert [schedule.due(step) and schedule.agree(step, 0) == 0 for step in range(3)] == [True] * 3
    assert schedule.agree(3, int(signal.SIGTERM)) == signal.SIGTERM
    with pytest.raises(ConfigError, match=r"check_interval_s: expected seconds >= 0 .* found -1"):
        AgreementSchedule(-1)


def test_agreement_schedule_every_n_steps_agrees_at_their_multiples() -> None:
    schedule = AgreementSchedule(every_n_steps=3)
    assert [step for step in range(10) if schedule.due(step)] == [0, 3, 6, 9]
    with pytest.raises(ConfigError, match="check_every_n_steps: expected a positive int or None, found 0"):
        AgreementSchedule(every_n_steps=0)


# ---------------------------------------------------------------------------------------- the stop sequence
# Two ranks stop together: rank 1 alone sends itself a real SIGTERM as step 5 starts. argv[3] "every":
# agree at every step (interval 0); "epoch_end": the schedule is never due after step 0, but step 8 is
# an epoch's last. At exit a launcher's clean-up SIGTERM arrives; each rank prints where it stopped.
STOP_LOOP = """
    import atexit, os, signal, sys, time
    import torch.distributed as dist
    from stream_plugin.preemption import PreemptionStop

    store, rank, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    every = 1000 if mode == "epoch_end" else None
    stop = PreemptionStop([signal.SIGTERM], exit_code=75, check_interval_s=0.0, check_every_n_steps=every)
    stop.start()
    for step in range(100):
        if rank == 1 and step == 5:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        signum = stop.signal_at(step, epoch_end=step == 8)
        if signum:
            print(f"stopped at step {step} by signal {signum}", flush=True)
            atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))
            stop.exit(signum, f"checkpoint-{step}", dist.barrier)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "stop_step"), [("every", 5), ("epoch_end", 8)])
def test_the_stop_sequence_stops_every_rank_at_the_same_step_with_the_exit_code(
    tmp_path: Path, mode: str, stop_step: int
) -> None:
    for status, out, err in run_ranks(STOP_LOOP, str(tmp_path / "store"), 2, mode):
        assert status == 75, err[-3000:]  # not -15: the clean-up SIGTERM was ignored
        assert out.strip() == f"stopped at step {stop_step} by signal {int(signal.SIGTERM)}"


# A rank that stops: an exit handler registered before the stop runs after the stop's own (last in,
# first out) and reports whether the default process group is still up.
EXIT_LOOP = """
    import atexit, signal, sys
    import torch.distributed as dist
    from stream_plugin.preemption import PreemptionStop

    dist.init_process_group("gloo", init_method=f"file://{sys.argv[1]}", rank=0, world_size=1)
    atexit.register(lambda: print(f"group up at exit: {dist.is_initialized()}", flush=True))
    stop = PreemptionStop([signal.SIGUSR2], exit_code=75)
    stop.start(signal.SIGUSR2)
    stop.exit(stop.signal_at(0), "checkpoint", dist.barrier)
"""


@pytest.mark.slow
def test_exit_destroys_the_default_process_group_before_the_interpreter_tears_down(tmp_path: Path) -> None:
    # Left to the interpreter's teardown, a gloo group can abort the process (status -6, "terminate
    # called without an active exception") instead of exiting with the stop's code.
    [(status, out, err)] = run_ranks(EXIT_LOOP, str(tmp_path / "store"), 1)
    assert status == 75, err[-3000:]
    assert out.strip() == "group up at exit: False"


def test_a_single_process_reads_its_own_flag_at_every_step_and_end_forgets_it() -> None:
    before = signal.getsignal(signal.SIGUSR2)
    stop = PreemptionStop([signal.SIGUSR2], check_every_n_steps=1000)
    assert stop.start()
    assert stop.signal_at(1) == 0
    os.kill(os.getpid(), signal.SIGUSR2)
    assert stop.signal_at(7) == signal.SIGUSR2  # no process group: no schedule, no collective
    stop.end()
    assert stop.signal_at(8) == 0
    assert signal.getsignal(signal.SIGUSR2) == before


def test_exit_waits_for_the_other_ranks_then_raises_preempted_with_the_exit_code() -> None:
    before = signal.getsignal(signal.SIGUSR2)
    stop = PreemptionStop([signal.SIGUSR2], exit_code=75)
    stop.start(signal.SIGUSR2)
    waited: list[bool] = []
    try:
        with pytest.raises(Preempted) as raised:
            stop.exit(stop.signal_at(0), "ckpt/last.ckpt", lambda: waited.append(True))
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN  # through interpreter shutdown
    finally:
        signal.signal(signal.SIGUSR2, before)
    assert waited == [True]
    assert (raised.value.code, raised.value.checkpoint, raised.value.signum) == (
        75,
        "ckpt/last.ckpt",
        signal.SIGUSR2,
    )
    assert str(raised.value) == "preempted by SIGUSR2; checkpoint saved to ckpt/last.ckpt"


def test_sigusr1_under_slurm_requeues_the_array_task_before_exiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_scontrol(tmp_path, monkeypatch, "100")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    before = signal.getsignal(signal.SIGUSR1)
    try:
        for requeue in (False, True):
            with pytest.raises(Preempted):
                PreemptionStop([signal.SIGUSR1], requeue_on_slurm=requeue).exit(
                    signal.SIGUSR1, "c", lambda: None
                )
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert calls.read_text().split() == ["requeue", "77_3"]


def test_a_failed_requeue_warns_and_still_exits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_scontrol(tmp_path, monkeypatch, "100", status=1)
    before = signal.getsignal(signal.SIGUSR1)
    try:
        failed = r"`scontrol requeue 100` failed with status 1; the job will not"
        with pytest.warns(UserWarning, match=failed), pytest.raises(Preempted):
            PreemptionStop([signal.SIGUSR1]).exit(signal.SIGUSR1, "c", lambda: None)
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_a_zero_exit_code_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"exit_code: expected an int in \[1, 255\], found 0; pass a non-zero"
    ):
        PreemptionStop(exit_code=0)


# ---------------------------------------------------------------------------------------- worker guard
# A training process with 2 DataLoader workers (persistent: they live until the interpreter exits) that
# prints their pids after the first two batches, waits for a line on stdin, then reads the rest of the epoch.
HOLD_WORKERS = """
    import sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from stream_plugin.preemption import WorkerSignalGuard

    if __name__ == "__main__":
        loader = DataLoader(
            TensorDataset(torch.arange(64)),
            batch_size=4,
            num_workers=2,
            persistent_workers=True,
            worker_init_fn=WorkerSignalGuard(),
            multiprocessing_context=sys.argv[1],
        )
        batches = iter(loader)
        next(batches), next(batches)  # one from each worker: both have run their worker_init_fn
        print("pids", *[worker.pid for worker in batches._workers], flush=True)
        sys.stdin.readline()
        print("batches", 2 + sum(1 for _ in batches), flush=True)
"""


@pytest.mark.slow
def test_worker_guard_keeps_workers_alive_through_sigterm_and_sigusr1_from_another_process() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLD_WORKERS), "fork"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    pids = [int(pid) for pid in process.stdout.readline().split()[1:]]
    assert len(pids) == 2
    for pid in pids:  # as a scheduler signalling the whole process group would
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGUSR1)
    out, err = process.communicate("go\n", timeout=120)
    assert process.returncode == 0, err[-3000:]
    assert out.strip() == "batches 16"


@pytest.mark.slow
def test_worker_guard_lets_the_training_process_stop_its_workers_at_exit() -> None:
    # multiprocessing stops daemon workers still alive at exit with a SIGTERM of its own; a guard that
    # ignored it too would hang here.
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(HOLD_WORKERS), "fork"],
        input="go\n",
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[1] == "batches 16"
    for pid in done.stdout.split()[1:3]:
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid), 0)  # the workers are gone too


def _record_blocked_signals(worker_id: int) -> None:
    del worker_id
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    os.environ["BLOCKED_IN_USER_INIT"] = ",".join(str(int(signum)) for signum in sorted(blocked))


def test_worker_guard_blocks_the_signals_before_the_user_init_runs() -> None:
    guard = WorkerSignalGuard(_record_blocked_signals, signals=[signal.SIGUSR2])
    restored = pickle.loads(pickle.dumps(guard))  # travels to spawned workers
    assert (restored.user_init, restored.signals) == (_record_blocked_signals, (signal.SIGUSR2,))
    outcome: dict[str, str] = {}

    def worker() -> None:  # a thread stands in for the worker: the mask is per thread
        guard(0)
        outcome["blocked"] = os.environ.pop("BLOCKED_IN_USER_INIT")

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert str(int(signal.SIGUSR2)) in outcome["blocked"].split(",")


def test_importing_the_preemption_module_does_not_import_torch() -> None:
    check = "import sys, stream_plugin.preemption; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", check], check=True)
