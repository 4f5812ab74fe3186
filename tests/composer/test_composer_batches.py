"""``num_samples_in_batch``: the per-rank sample count Composer adds to ``sample_in_epoch``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from stream_plugin.errors import ConfigError
from stream_plugin_composer import num_samples_in_batch


def test_dict_batch_counts_the_leading_dimension_of_its_tensors() -> None:
    batch = {"input_ids": torch.zeros(6, 32), "labels": torch.zeros(6, 32), "id": torch.arange(6)}
    assert num_samples_in_batch(batch) == 6


def test_tuple_batch_counts_its_fields() -> None:
    assert num_samples_in_batch((torch.zeros(5, 3), torch.zeros(5))) == 5


def test_collated_strings_and_arrays_count_as_fields_and_scalars_are_skipped() -> None:
    batch = {"text": ["a", "b", "c"], "x": np.zeros((3, 2)), "step": torch.tensor(7), "scale": 0.5}
    assert num_samples_in_batch(batch) == 3


def test_nested_batches_are_searched() -> None:
    batch = ({"x": torch.zeros(4, 2)}, [torch.zeros(4), torch.zeros(4, 9)])
    assert num_samples_in_batch(batch) == 4


def test_a_plain_tensor_is_its_own_batch() -> None:
    assert num_samples_in_batch(torch.zeros(9, 2)) == 9


def test_fields_of_different_lengths_are_an_error_naming_them() -> None:
    with pytest.raises(ConfigError, match=r"same length, found \{\"batch\['x'\]\": 4, \"batch\['y'\]\": 3\}"):
        num_samples_in_batch({"x": torch.zeros(4), "y": torch.zeros(3)})


def test_a_batch_without_any_sized_field_is_an_error() -> None:
    with pytest.raises(ConfigError, match="expected a batch with at least one tensor, array or list field"):
        num_samples_in_batch({"step": 3})
