import pytest

from stream_plugin.errors import ConfigError
from stream_plugin.units import parse_bytes, parse_count, parse_whole_number


@pytest.mark.parametrize(
    ("text", "expected"),
    [("64mb", 64 << 20), ("10gb", 10 << 30), ("1kb", 1024), ("512", 512), ("1.5kb", 1536), ("7b", 7)],
)
def test_parse_bytes_reads_binary_units_like_mosaicml(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


def test_parse_bytes_passes_ints_through() -> None:
    assert parse_bytes(123) == 123


@pytest.mark.parametrize("bad", ["64 megs", "mb", "-5", True, "64mibb"])
def test_parse_bytes_rejects_unreadable_sizes_with_an_example(bad: object) -> None:
    with pytest.raises(ConfigError, match="cache_limit: expected"):
        parse_bytes(bad, name="cache_limit")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"), [("100k", 100_000), ("1.5m", 1_500_000), ("2b", 2 * 10**9), ("42", 42)]
)
def test_parse_count_reads_decimal_suffixes_like_mosaicml(text: str, expected: int) -> None:
    assert parse_count(text) == expected


def test_parse_count_rejects_unknown_suffix() -> None:
    with pytest.raises(
        ConfigError, match=r"epoch_size: expected a number with an optional suffix k/m/b/t .* found '10x'"
    ):
        parse_count("10x", name="epoch_size")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("35.78kb", int(35.78 * 1024)), ("64MiB", 64 << 20), ("1.5GiB", 3 << 29), (".5kb", 512), ("2KB", 2048)],
)
def test_parse_bytes_reads_floats_and_iec_units(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


def test_parse_bytes_and_count_take_whole_floats_as_yaml_gives_them() -> None:
    assert parse_bytes(1e9) == 10**9
    assert parse_count(2e3) == 2000


@pytest.mark.parametrize("bad", [1.5, -2.0])
def test_parse_bytes_refuses_fractional_or_negative_floats(bad: float) -> None:
    with pytest.raises(ConfigError, match=r"cache_limit: expected a whole number >= 0 or a string such as '64mb'"):
        parse_bytes(bad, name="cache_limit")


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "8", float("nan"), float("inf")])
def test_parse_whole_number_refuses_what_is_not_a_whole_number_of_at_least_one(value: object) -> None:
    with pytest.raises(ConfigError, match=r"max_seq_len: expected a whole number >= 1 \(tokens\), found .*; fix it"):
        parse_whole_number(value, name="max_seq_len", meaning="tokens", fix="fix it")


def test_parse_whole_number_accepts_whole_floats_as_yaml_writes_them() -> None:
    assert parse_whole_number(2048.0, name="n", meaning="m", fix="f") == 2048
    assert parse_whole_number(3, name="n", meaning="m", fix="f") == 3
