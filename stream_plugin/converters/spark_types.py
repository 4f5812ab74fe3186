"""Spark SQL types to MDS column encodings: MosaicML Streaming 0.13's mapping and its refusals.

Inference (no ``columns`` given) maps each field of the DataFrame's schema:

=========================================  =====================
Spark type                                 MDS encoding
=========================================  =====================
ByteType / ShortType                       uint8 / uint16
IntegerType / LongType                     int32 / int64
FloatType / DoubleType                     float32 / float64
DecimalType(p, s)                          str_decimal
StringType / BinaryType                    str / bytes
ArrayType of Short/Integer/Long            ndarray:int16 / int32 / int64
ArrayType of Float/Double                  ndarray:float32 / float64
=========================================  =====================

Every other type (boolean, dates, timestamps, intervals, maps, structs, other arrays) is refused, as
MosaicML refuses it. Explicit ``columns`` must name DataFrame columns with the encoding above, or
``json`` for a column whose type is made of structs, arrays, strings, numbers, booleans and nulls.

Two deliberate differences from MosaicML: an array matches whether or not it may hold nulls
(MosaicML refuses ``containsNull=False`` by accident of type equality), and ``json`` accepts every
integral and floating type, not only int and float.
"""

from __future__ import annotations

from typing import Any

from stream_plugin.errors import ConfigError

# Spark type class name -> MDS encoding (MosaicML's SPARK_TO_MDS, keyed by class so parameters such
# as a decimal's precision do not matter).
SCALAR_TO_MDS: dict[str, str] = {
    "ByteType": "uint8",
    "ShortType": "uint16",
    "IntegerType": "int32",
    "LongType": "int64",
    "FloatType": "float32",
    "DoubleType": "float64",
    "DecimalType": "str_decimal",
    "StringType": "str",
    "BinaryType": "bytes",
}
ARRAY_TO_MDS: dict[str, str] = {
    "ShortType": "ndarray:int16",
    "IntegerType": "ndarray:int32",
    "LongType": "ndarray:int64",
    "FloatType": "ndarray:float32",
    "DoubleType": "ndarray:float64",
}
_JSON_LEAVES = {
    "StringType",
    "ByteType",
    "ShortType",
    "IntegerType",
    "LongType",
    "FloatType",
    "DoubleType",
    "BooleanType",
    "NullType",
}
SUPPORTED_ENCODINGS = frozenset(SCALAR_TO_MDS.values()) | frozenset(ARRAY_TO_MDS.values())


def _kind(data_type: Any) -> str:
    return type(data_type).__name__


def spark_type_to_mds(name: str, data_type: Any) -> str:
    """The MDS encoding of a column of Spark type ``data_type``; ConfigError when there is none."""
    if _kind(data_type) == "ArrayType":
        encoding = ARRAY_TO_MDS.get(_kind(data_type.elementType))
    else:
        encoding = SCALAR_TO_MDS.get(_kind(data_type))
    if encoding is None:
        raise ConfigError(
            f"dataframe_to_mds: column {name!r}: expected a Spark type with an MDS encoding "
            f"({', '.join(sorted(SCALAR_TO_MDS))}, or an array of {', '.join(sorted(ARRAY_TO_MDS))}), found "
            f"{data_type.simpleString()}; cast the column (df.withColumn({name!r}, df[{name!r}].cast('string'))), "
            f"drop it, or pass mds_kwargs['columns'] with 'json' for nested values"
        )
    return encoding


def is_json_compatible(data_type: Any) -> bool:
    """Whether values of ``data_type`` are plain JSON: structs and arrays of strings, numbers, bools, nulls."""
    kind = _kind(data_type)
    if kind == "StructType":
        return all(is_json_compatible(field.dataType) for field in data_type.fields)
    if kind == "ArrayType":
        return is_json_compatible(data_type.elementType)
    return kind in _JSON_LEAVES


def infer_columns(schema: Any) -> dict[str, str]:
    """MDS columns for every field of a Spark ``StructType`` schema, in schema order."""
    return {field.name: spark_type_to_mds(field.name, field.dataType) for field in schema.fields}


def check_columns(schema: Any, columns: dict[str, str]) -> None:
    """Refuse user ``columns`` that name missing fields or encodings that do not match the Spark types."""
    fields = {field.name: field.dataType for field in schema.fields}
    for name, encoding in columns.items():
        if name not in fields:
            raise ConfigError(
                f"dataframe_to_mds: mds_kwargs['columns'] names {name!r}, expected one of the DataFrame's "
                f"columns {sorted(fields)}; fix the name or select/alias the column first"
            )
        data_type = fields[name]
        if encoding == "json":
            if not is_json_compatible(data_type):
                raise ConfigError(
                    f"dataframe_to_mds: column {name!r}: expected a JSON-compatible Spark type for 'json' "
                    f"(structs, arrays, strings, numbers, booleans), found {data_type.simpleString()}; "
                    "cast it or choose another encoding"
                )
            continue
        base = ":".join(encoding.split(":")[:2]) if encoding.startswith("ndarray:") else encoding
        if base not in SUPPORTED_ENCODINGS:
            raise ConfigError(
                f"dataframe_to_mds: column {name!r}: expected an encoding in {sorted(SUPPORTED_ENCODINGS)} "
                f"or 'json', found {encoding!r}; use the encoding its Spark type maps to, or cast the column"
            )
        expected = spark_type_to_mds(name, data_type)
        if base != expected:
            raise ConfigError(
                f"dataframe_to_mds: column {name!r}: mds_kwargs['columns'] says {encoding!r} but its Spark type "
                f"{data_type.simpleString()} maps to {expected!r}; use {expected!r} or cast the column"
            )
