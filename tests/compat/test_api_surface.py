"""MosaicML Streaming 0.13's public API, kept as data: each name exists here with a compatible signature,
or is listed in ``DIFFERENCES`` with its reason.

The names are those MosaicML's docs and examples import (``from streaming import ...``,
``streaming.base.util.merge_index``, ``streaming.base.converters.dataframe_to_mds``,
``streaming.base.stream.streams_registry``) and the public methods, properties and attributes of
those classes, copied from MosaicML's source at v0.13.0 (``streaming/base/``). A cleanup that removes
one of them fails here.

Compatible means every call MosaicML accepts, ours accepts with the same meaning of defaults:

* each of MosaicML's parameters exists here under the same name; one it takes positionally we take at
  the same position; its default is ours (``==``); one it requires we may give a default;
* a parameter of ours that MosaicML lacks has a default (``data_parallel_*``, ``storage_options``...);
* an ``__init__`` of ours whose ``**kwargs`` go to its base class's ``__init__`` (the writers) accepts
  the base's parameters too.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stream_plugin

REQUIRED = inspect.Parameter.empty

# ---------------------------------------------------------------------------------------- the data

_WRITER_OPTIONS = (
    "out, keep_local=False, compression=None, hashes=None, size_limit=67108864, "
    # MosaicML takes these four through **kwargs and documents them; ours are named parameters.
    "progress_bar=False, max_workers=None, retry=2, exist_ok=False"
)
_WRITER_METHODS = {
    "write": "(self, sample)",
    "finish": "(self)",
    "get_config": "(self)",
    "encode_sample": "(self, sample)",
    "flush_shard": "(self)",
    "cancel_future_jobs": "(self)",
    "exception_callback": "(self, future)",
    "__enter__": "(self)",
    "__exit__": "(self, exc_type, exc, traceback)",
}

# MosaicML name -> (our object as "module:qualname", {member: MosaicML 0.13 signature}).
# ``__init__`` is the class's constructor; every other key is a method.
METHODS: dict[str, tuple[str, dict[str, str]]] = {
    "streaming.MDSWriter": (
        "stream_plugin:MDSWriter",
        {
            "__init__": f"(self, *, columns, {_WRITER_OPTIONS})",
            **_WRITER_METHODS,
            "encode_joint_shard": "(self)",
        },
    ),
    "streaming.JSONWriter": (
        "stream_plugin:JSONWriter",
        {
            "__init__": f"(self, *, columns, newline='\\n', {_WRITER_OPTIONS})",
            **_WRITER_METHODS,
            "encode_split_shard": "(self)",
        },
    ),
    "streaming.XSVWriter": (
        "stream_plugin:XSVWriter",
        {
            "__init__": f"(self, *, columns, separator, newline='\\n', {_WRITER_OPTIONS})",
            **_WRITER_METHODS,
            "encode_split_shard": "(self)",
        },
    ),
    "streaming.CSVWriter": (
        "stream_plugin:CSVWriter",
        {
            "__init__": f"(self, *, columns, newline='\\n', {_WRITER_OPTIONS})",
            **_WRITER_METHODS,
            "encode_split_shard": "(self)",
        },
    ),
    "streaming.TSVWriter": (
        "stream_plugin:TSVWriter",
        {
            "__init__": f"(self, *, columns, newline='\\n', {_WRITER_OPTIONS})",
            **_WRITER_METHODS,
            "encode_split_shard": "(self)",
        },
    ),
    "streaming.StreamingDataset": (
        "stream_plugin:StreamingDataset",
        {
            "__init__": (
                "(self, *, streams=None, remote=None, local=None, split=None, download_retry=2, "
                "download_timeout=60.0, validate_hash=None, keep_zip=False, epoch_size=None, "
                "predownload=None, cache_limit=None, sampling_method='balanced', sampling_granularity=1, "
                "partition_algo='relaxed', num_canonical_nodes=None, batch_size=None, shuffle=False, "
                "shuffle_algo='py1e', shuffle_seed=9176, shuffle_block_size=None, batching_method='random', "
                "allow_unsafe_types=False, replication=None, stream_name='stream', stream_config=None)"
            ),
            "__len__": "(self)",
            "__iter__": "(self)",
            "__getitem__": "(self, at)",
            "get_item": "(self, sample_id, retry=7)",
            "state_dict": "(self, num_samples, from_beginning)",
            "load_state_dict": "(self, obj)",
            "resample_streams": "(self, epoch, stream_id=None)",
            "evict_shard": "(self, shard_id)",
            "evict_coldest_shard": "(self)",
            "prepare_shard": "(self, shard_id, blocking=True)",
            "on_exception": "(self, future)",
        },
    ),
    "streaming.Stream": (
        "stream_plugin:Stream",
        {
            "__init__": (
                "(self, *, remote=None, local=None, split=None, proportion=None, repeat=None, choose=None, "
                "download_retry=None, download_timeout=None, validate_hash=None, keep_zip=None)"
            ),
            "apply_default": "(self, default)",
            "validate_weights": "(cls, streams)",
            "apply_weights": "(cls, streams, samples_per_stream, choose_per_epoch, seed)",
            "prepare_shard": "(self, shard)",
            "get_shards": "(self, world, allow_unsafe_types)",
            "set_up_local": "(self, shards, cache_usage_per_shard)",
            "get_index_size": "(self)",
        },
    ),
    "streaming.StreamingDataLoader": (
        "stream_plugin:StreamingDataLoader",
        {
            # MosaicML's is (*args, **kwargs), all handed to torch's DataLoader; its docs pass the dataset
            # and batch_size first and every other DataLoader argument by name.
            "__init__": "(self, dataset, batch_size=1, **kwargs)",
            "__iter__": "(self)",
            "state_dict": "(self)",
            "load_state_dict": "(self, obj)",
        },
    ),
    "streaming.LocalDataset": (
        "stream_plugin:LocalDataset",
        {
            "__init__": "(self, local, split=None)",
            "__len__": "(self)",
            "__getitem__": "(self, at)",
            "get_item": "(self, sample_id)",
        },
    ),
}

# Documented helpers: MosaicML name -> (ours, MosaicML 0.13 signature).
HELPERS: dict[str, tuple[str, str]] = {
    "streaming.base.util.merge_index": ("stream_plugin:merge_index", "(*args, **kwargs)"),
    # merge_index's two call forms (its docstring), MosaicML's _merge_index_from_list / _from_root:
    "streaming.base.util.merge_index(index_file_urls, ...)": (
        "stream_plugin.format.merge:merge_index_files",
        "(index_file_urls, out, keep_local=True, download_timeout=60)",
    ),
    "streaming.base.util.merge_index(out, ...)": (
        "stream_plugin.format.merge:merge_index_folder",
        "(out, keep_local=True, download_timeout=60)",
    ),
    "streaming.base.converters.dataframe_to_mds": (
        "stream_plugin.converters:dataframe_to_mds",
        "(dataframe, merge_index=True, mds_kwargs=None, udf_iterable=None, udf_kwargs=None)",
    ),
    "streaming.base.converters.dataframeToMDS": (
        "stream_plugin.converters:dataframeToMDS",
        "(dataframe, merge_index=True, mds_kwargs=None, udf_iterable=None, udf_kwargs=None)",
    ),
    "streaming.base.util.clean_stale_shared_memory": ("stream_plugin:clean_stale_shared_memory", "()"),
}

# Documented objects that are not functions: MosaicML name -> ours, with the methods it documents.
OBJECTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "streaming.base.stream.streams_registry": ("stream_plugin:streams_registry", ("register", "get")),
    "streaming.base.format.mds.encodings.Encoding": ("stream_plugin.format.encodings:Encoding", ()),
}

# Public properties and attributes, read on a small real instance of each class.
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "streaming.StreamingDataset": (
        # properties
        "size",
        "next_epoch",
        "cache_usage",
        # attributes its __init__ sets
        "allow_unsafe_types",
        "batch_size",
        "batching_method",
        "cache_limit",
        "epoch_size",
        "num_canonical_nodes",
        "num_samples",
        "num_shards",
        "partition_algo",
        "predownload",
        "replication",
        "samples_per_shard",
        "samples_per_stream",
        "sampling_granularity",
        "sampling_method",
        "shard_offset_per_stream",
        "shards",
        "shards_per_stream",
        "shuffle",
        "shuffle_algo",
        "shuffle_block_size",
        "shuffle_seed",
        "spanner",
        "stream_per_shard",
        "streams",
        "length",
        "num_streams",
        "sample_offset_per_shard",
        "sample_offset_per_stream",
        "epoch_seed_change",
        "initial_physical_nodes",
        "max_shard_size_across_all_streams",
    ),  # fmt: skip
    "streaming.Stream": (
        "remote",
        "local",
        "split",
        "proportion",
        "repeat",
        "choose",
        "download_retry",
        "download_timeout",
        "validate_hash",
        "keep_zip",
        "safe_keep_zip",
    ),  # fmt: skip
    "streaming.StreamingDataLoader": ("num_samples_yielded",),
    "streaming.LocalDataset": ("size", "local", "split", "num_samples", "shards", "spanner"),
    "streaming.MDSWriter": ("format", "local", "remote", "keep_local", "compression", "hashes", "size_limit"),
}

# Deliberate differences, by "MosaicML name.member" -> reason.
# A listed name that becomes compatible fails too, so this list stays true.
DIFFERENCES: dict[str, str] = {
    # writers: MosaicML's internal stages of a shard, public by name only
    **{
        f"streaming.{writer}.{member}": reason
        for writer in ("MDSWriter", "JSONWriter", "XSVWriter", "CSVWriter", "TSVWriter")
        for member, reason in {
            "cancel_future_jobs": "MosaicML's clean-up after an upload failure; ours aborts inside "
            "finish() / __exit__ and raises StorageError, with no index written",
            "exception_callback": "MosaicML's future callback that sets its stop event; ours collects "
            "failures itself and raises them from write() / finish()",
            "encode_joint_shard": "MosaicML's hook that lays out one shard; ours is build_files(samples), "
            "which returns every file of the shard",
            "encode_split_shard": "MosaicML's hook that lays out one shard; ours is build_files(samples), "
            "which returns every file of the shard",
        }.items()
        if member in METHODS[f"streaming.{writer}"][1]
    },
    # StreamingDataset
    "streaming.StreamingDataset.get_item": "no retry argument: MosaicML retries its shared-memory "
    "hand-over 7 times; our reads wait on file locks and never need a retry",
    "streaming.StreamingDataset.resample_streams": "MosaicML's per-epoch draw of the mix, public by "
    "name; ours is a pure function of (seed, epoch) in order/mixing.py, not a dataset method",
    "streaming.StreamingDataset.prepare_shard": "no blocking argument: a shard is prepared by the "
    "node's cache, which always waits for it (a second caller waits on the file lock)",
    "streaming.StreamingDataset.on_exception": "MosaicML's thread-pool callback; ours has no such threads "
    "on the dataset (downloads run in the cache, whose errors are raised to the reader)",
    "streaming.StreamingDataset.epoch_seed_change": "MosaicML's resume bookkeeping in shared memory; our "
    "seeds are keyed by (seed, epoch, purpose), nothing to store",
    "streaming.StreamingDataset.initial_physical_nodes": "MosaicML's record of the first run's node "
    "count, for elastic resume; our order does not depend on the layout (docs/order.md)",
    "streaming.StreamingDataset.max_shard_size_across_all_streams": "MosaicML's cache_limit check; ours "
    "is check_cache_limit(num_workers), which counts the shards in use at once",
    # Stream
    "streaming.Stream.validate_weights": "MosaicML's check of a list of streams' weights, public by name; "
    "ours is order/mixing.py's StreamWeight, checked when a Stream is built",
    "streaming.Stream.apply_weights": "MosaicML's per-epoch draw of the mix; ours is a pure function of "
    "(seed, epoch) in order/mixing.py",
    "streaming.Stream.prepare_shard": "shards are downloaded, verified and unpacked by the node's cache "
    "(cache/shard_cache.py), not by the Stream",
    "streaming.Stream.get_shards": "the index is read by the dataset's plan (reading/dataset_plan.py) "
    "through the cache, not by the Stream",
    "streaming.Stream.set_up_local": "the local folder is claimed by the cache (cache/locks.py), not by "
    "the Stream",
    "streaming.Stream.get_index_size": "index sizes are accounted by the cache, not by the Stream",
    "streaming.Stream.safe_keep_zip": "MosaicML's keep_zip forced on for a local-only stream; ours never "
    "deletes a local-only stream's files (docs/mosaicml-differences.md)",
    # StreamingDataLoader
    # helpers
    "streaming.base.format.mds.encodings.Encoding": "custom encodings are registered with "
    "stream_plugin.register_encoding(name, encode, decode), not by subclassing an Encoding class "
    "into the private _encodings dict (docs/writing.md)",
    "streaming.base.util.clean_stale_shared_memory": "no shared memory, so nothing goes stale: the "
    "cache coordinates with file locks (docs/storage.md)",
}

# ----------------------------------------------------------------------------------- the checks


def _signature(text: str) -> list[inspect.Parameter]:
    """MosaicML's signature, written as ``(a, *, b=1, **kwargs)``, as inspect parameters."""
    args = ast.parse(f"def f{text}: pass").body[0].args  # type: ignore[attr-defined]
    params: list[inspect.Parameter] = []
    positional = args.posonlyargs + args.args
    defaults = [REQUIRED] * (len(positional) - len(args.defaults)) + [
        ast.literal_eval(d) for d in args.defaults
    ]
    for arg, default in zip(positional, defaults):
        params.append(inspect.Parameter(arg.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
    if args.vararg:
        params.append(inspect.Parameter(args.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults):
        value = REQUIRED if kw_default is None else ast.literal_eval(kw_default)
        params.append(inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY, default=value))
    if args.kwarg:
        params.append(inspect.Parameter(args.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return params


def _resolve(path: str) -> Any:
    module, _, qualname = path.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


# Base-class parameters a subclass passes itself (so they are not the caller's to give).
_BOUND_BY_SUBCLASS = {"CSVWriter": {"separator"}, "TSVWriter": {"separator"}}


def _our_parameters(owner: type | None, member: str, function: Any) -> list[inspect.Parameter]:
    """Our parameters, without self/cls; an ``__init__`` whose ``**kwargs`` go to the base class's
    ``__init__`` gains the base's parameters (the writers pass every option through)."""
    params = list(inspect.signature(function).parameters.values())
    if owner is not None and not isinstance(
        inspect.getattr_static(owner, member), (classmethod, staticmethod)
    ):
        params = params[1:]
    if owner is None or member != "__init__":
        return params
    bound = _BOUND_BY_SUBCLASS.get(owner.__name__, set())
    for base in owner.__mro__[1:]:
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params) or "__init__" not in vars(base):
            continue
        if base.__module__.split(".")[0] != "stream_plugin":
            break
        names = {p.name for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD}
        inherited = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            if p.kind is not inspect.Parameter.VAR_KEYWORD
            else p
            for p in list(inspect.signature(base.__init__).parameters.values())[1:]
            if p.name not in names and p.name not in bound and p.kind is not inspect.Parameter.VAR_POSITIONAL
        ]
        own = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
        params = own + inherited  # keeps **kwargs only where the base has it too
    return params


def _incompatibilities(theirs: list[inspect.Parameter], ours: list[inspect.Parameter]) -> list[str]:
    """Why a call that MosaicML's signature accepts would fail, or mean something else, with ours."""
    problems = []
    by_name = {p.name: p for p in ours}
    our_positional = [
        p.name
        for p in ours
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    kinds = {p.kind for p in ours}
    their_positional = [p for p in theirs if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    for index, param in enumerate(their_positional):
        if index >= len(our_positional) or our_positional[index] != param.name:
            problems.append(f"{param.name}: positional argument {index} in MosaicML, not in ours")
    for param in theirs:
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            if param.kind not in kinds:
                problems.append(f"{param.kind.description} {param.name}: accepted by MosaicML, not by ours")
            continue
        mine = by_name.get(param.name)
        if mine is None or mine.kind is inspect.Parameter.POSITIONAL_ONLY:
            problems.append(f"{param.name}: MosaicML's parameter, missing here")
        elif param.default is not REQUIRED and (mine.default is REQUIRED or mine.default != param.default):
            problems.append(f"{param.name}: MosaicML's default {param.default!r}, ours {mine.default!r}")
    their_names = {p.name for p in theirs}
    for mine in ours:
        variadic = mine.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        if mine.name not in their_names and not variadic and mine.default is REQUIRED:
            problems.append(f"{mine.name}: required here, unknown to MosaicML")
    return problems


def _method_cases() -> Iterator[Any]:
    for name, (ours, members) in METHODS.items():
        for member, signature in members.items():
            yield pytest.param(name, ours, member, signature, id=f"{name}.{member}")


def _check(key: str, problems: list[str]) -> None:
    """No problems, or a listed difference that still is one."""
    if key in DIFFERENCES:
        assert DIFFERENCES[key].strip(), f"{key}: expected a reason in DIFFERENCES, found an empty one"
        assert problems, (
            f"{key}: expected a difference from MosaicML (DIFFERENCES says: {DIFFERENCES[key]}), found it "
            "compatible; remove it from DIFFERENCES"
        )
        return
    assert not problems, (
        f"{key}: expected MosaicML 0.13's public API to exist here, compatibly, found {problems}; restore "
        "it, or list it in DIFFERENCES with the reason"
    )


@pytest.mark.parametrize(("name", "ours", "member", "signature"), list(_method_cases()))
def test_mosaicml_method_exists_with_a_compatible_signature(
    name: str, ours: str, member: str, signature: str
) -> None:
    owner = _resolve(ours)
    function = getattr(owner, member, None)
    theirs = _signature(signature)[1:]  # without self / cls
    if function is None:
        problems = [f"{member}: no such method"]
    else:
        problems = _incompatibilities(theirs, _our_parameters(owner, member, function))
    _check(f"{name}.{member}", problems)


@pytest.mark.parametrize(("name", "ours", "signature"), [pytest.param(*args, id=args[0]) for args in [
    (name, ours, signature) for name, (ours, signature) in HELPERS.items()
]])  # fmt: skip
def test_mosaicml_helper_exists_with_a_compatible_signature(name: str, ours: str, signature: str) -> None:
    try:
        function = _resolve(ours)
    except AttributeError:
        problems = [f"{ours}: no such function"]
    else:
        problems = _incompatibilities(_signature(signature), _our_parameters(None, "", function))
    _check(name, problems)


@pytest.mark.parametrize("name", list(OBJECTS))
def test_mosaicml_documented_object_exists(name: str) -> None:
    ours, methods = OBJECTS[name]
    try:
        found = _resolve(ours)
    except AttributeError:
        problems = [f"{ours}: no such object"]
    else:
        problems = [
            f"{method}: no such method" for method in methods if not callable(getattr(found, method, None))
        ]
    _check(name, problems)


# ------------------------------------------------------------------ attributes, on real instances


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("api_surface")
    writer = stream_plugin.MDSWriter(out=str(folder / "data"), columns={"n": "int"})
    with writer:
        for n in range(10):
            writer.write({"n": n})
    dataset = stream_plugin.StreamingDataset(local=str(folder / "data"), batch_size=2)
    local = stream_plugin.LocalDataset(str(folder / "data"))
    yield {
        "streaming.MDSWriter": writer,
        "streaming.StreamingDataset": dataset,
        "streaming.Stream": stream_plugin.Stream(local=str(folder / "data")),
        "streaming.StreamingDataLoader": stream_plugin.StreamingDataLoader(dataset, batch_size=2),
        "streaming.LocalDataset": local,
    }
    local.close()


@pytest.mark.parametrize(
    ("name", "attribute"),
    [
        pytest.param(name, attribute, id=f"{name}.{attribute}")
        for name, names in ATTRIBUTES.items()
        for attribute in names
    ],
)
def test_mosaicml_attribute_exists(name: str, attribute: str, instances: dict[str, Any]) -> None:
    problems = [] if hasattr(instances[name], attribute) else [f"{attribute}: no such attribute or property"]
    _check(f"{name}.{attribute}", problems)


def test_every_listed_difference_names_a_checked_member() -> None:
    checked = {f"{name}.{member}" for name, (_, members) in METHODS.items() for member in members}
    checked |= {f"{name}.{attribute}" for name, names in ATTRIBUTES.items() for attribute in names}
    checked |= set(HELPERS) | set(OBJECTS)
    assert sorted(set(DIFFERENCES) - checked) == []


def test_the_checker_catches_a_missing_parameter_a_changed_default_and_a_new_required_one() -> None:
    theirs = _signature("(a, b=1, *, c=None)")
    assert _incompatibilities(theirs, _signature("(a, b=1, *, c=None, d=0)")) == []
    assert _incompatibilities(theirs, _signature("(a, *, b=1, c=None)")) == [
        "b: positional argument 1 in MosaicML, not in ours"
    ]
    assert _incompatibilities(theirs, _signature("(a, b=2, *, c=None)")) == [
        "b: MosaicML's default 1, ours 2"
    ]
    assert _incompatibilities(theirs, _signature("(a, b=1)")) == ["c: MosaicML's parameter, missing here"]
    assert _incompatibilities(theirs, _signature("(a, b=1, *, c=None, d)")) == [
        "d: required here, unknown to MosaicML"
    ]


def test_the_data_names_every_public_name_of_mosaicmls_top_level_package() -> None:
    """MosaicML 0.13's ``streaming.__all__`` (less its model-zoo subpackages) is all here."""
    top_level = {"StreamingDataLoader", "Stream", "StreamingDataset", "CSVWriter", "JSONWriter", "MDSWriter",
                 "TSVWriter", "XSVWriter", "LocalDataset"}  # fmt: skip
    assert {f"streaming.{name}" for name in top_level} <= set(METHODS)
    assert top_level <= set(stream_plugin.__all__)


def test_the_writers_signature_includes_their_base_options(tmp_path: Path) -> None:
    """The **kwargs rule is not a blanket pass: CSVWriter really takes keep_local and refuses junk."""
    params = {
        p.name for p in _our_parameters(stream_plugin.CSVWriter, "__init__", stream_plugin.CSVWriter.__init__)
    }
    assert {"keep_local", "exist_ok", "retry", "newline"} <= params and "separator" not in params
    with pytest.raises(TypeError):
        stream_plugin.CSVWriter(out=str(tmp_path), columns={"n": "int"}, no_such_option=1)
