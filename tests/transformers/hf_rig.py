"""One rank of a Hugging Face Trainer run over a StreamingDataset, run as a script (one process per rank).

``python hf_rig.py CONFIG_JSON``: trains a one-parameter model whose forward records the sample ids of
every micro-batch, and prints ``{"train": [[ids of micro-batch], ...], "eval": [...], ...}`` as JSON on
its last line. ``trainer`` picks the plain ``transformers.Trainer`` (what a new user writes) or our
``StreamingTrainer``. With ``signal_at_step`` the rank SIGTERMs itself (and its workers' process group
is left alone) at the end of that optimizer step.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn


class IdModel(nn.Module):
    """One parameter; the loss pulls it towards the batch's ids. Records every id it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.train_ids: list[list[int]] = []
        self.eval_ids: list[list[int]] = []

    def forward(self, id: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:  # noqa: A002
        ids = [int(i) for i in id.tolist()]
        (self.train_ids if self.training else self.eval_ids).append(ids)
        values = id.to(torch.float32)
        loss = ((self.weight - values / 100.0) ** 2).mean()
        return {"loss": loss, "logits": values.unsqueeze(1) + 0 * self.weight}


def write_dataset(folder: Path, samples: int) -> None:
    from stream_plugin import MDSWriter

    with MDSWriter(out=str(folder), columns={"id": "int"}, size_limit=1 << 9) as writer:
        for sample_id in range(samples):
            writer.write({"id": sample_id})


def collate(samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    ids = torch.tensor([int(sample["id"]) for sample in samples], dtype=torch.int64)
    return {"id": ids, "labels": ids}


def count_labels(prediction: Any) -> dict[str, float]:
    """What evaluation gathered: how many labels, how many distinct, and their sum."""
    labels = [int(label) for label in prediction.label_ids.reshape(-1).tolist()]
    return {"count": len(labels), "distinct": len(set(labels)), "sum": sum(labels)}


def main(config: dict[str, Any]) -> dict[str, Any]:
    from transformers import Trainer, TrainingArguments

    from stream_plugin import StreamingDataset

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    dataset = StreamingDataset(
        local=config["data"],
        shuffle=True,
        shuffle_seed=7,
        batch_size=config["batch_size"],
    )
    eval_dataset = None
    if config.get("eval_data"):
        eval_dataset = StreamingDataset(
            local=config["eval_data"], shuffle=False, batch_size=config["batch_size"]
        )
    args = TrainingArguments(
        output_dir=config["output_dir"],
        per_device_train_batch_size=config["batch_size"],
        per_device_eval_batch_size=config["batch_size"],
        gradient_accumulation_steps=config.get("grad_accum", 1),
        max_steps=config["max_steps"],
        save_strategy="steps" if config.get("save_steps") else "no",
        save_steps=config.get("save_steps") or 500,
        learning_rate=0.01,
        logging_strategy="no",
        report_to=[],
        dataloader_num_workers=config.get("num_workers", 0),
        dataloader_multiprocessing_context=config.get("start_method"),
        use_cpu=True,
        ddp_backend="gloo" if world > 1 else None,
        disable_tqdm=True,
        seed=1,
        save_only_model=False,
        accelerator_config={"dispatch_batches": config["dispatch_batches"]} if "dispatch_batches" in config else None,
    )
    model = IdModel()
    callbacks = []
    trainer_class: type[Trainer] = Trainer
    if config["trainer"] == "streaming":
        from stream_plugin_transformers import PreemptionCheckpoint, StreamingTrainer

        trainer_class = StreamingTrainer
        callbacks.append(PreemptionCheckpoint(check_interval_s=0))
    elif config["trainer"] == "plain+callback":
        from stream_plugin_transformers import DataStateCheckpoint

        callbacks.append(DataStateCheckpoint())
    if config.get("signal_at_step") is not None:
        callbacks.append(_SignalAt(config["signal_at_step"], rank=config.get("signal_rank", 0)))
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        data_collator=collate,
        callbacks=callbacks,
        compute_metrics=count_labels if eval_dataset is not None else None,
    )
    result: dict[str, Any] = {"rank": rank}
    if config.get("evaluate_only"):
        result["metrics"] = trainer.evaluate()
    else:
        resume = config.get("resume")
        if resume == "latest":  # what a job that is simply rerun after preemption passes
            from stream_plugin_transformers import latest_checkpoint

            resume = latest_checkpoint(config["output_dir"])
        try:
            trainer.train(resume_from_checkpoint=resume)
        finally:
            ids_file = Path(config["output_dir"], f"train-ids-{config.get('tag', 'run')}-{rank}.json")
            ids_file.write_text(json.dumps({"resumed_from": resume, "train": model.train_ids}))
        result["global_step"] = trainer.state.global_step
    result["train"] = model.train_ids
    result["eval"] = model.eval_ids
    return result


class _SignalAt:
    """A callback that SIGTERMs this process at the end of optimizer step ``step`` (on rank ``rank``)."""

    def __new__(cls, step: int, rank: int) -> Any:
        from transformers import TrainerCallback

        class SignalAt(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                if state.global_step == step and int(os.environ.get("RANK", "0")) == rank:
                    os.kill(os.getpid(), signal.SIGTERM)

        return SignalAt()


if __name__ == "__main__":
    outcome = main(json.loads(sys.argv[1]))
    print(json.dumps(outcome))
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        # Left to interpreter exit, gloo's threads were at times destroyed while joinable: "terminate called
        # without an active exception", SIGABRT, after the run had finished (about 1 run in 5).
        dist.destroy_process_group()
