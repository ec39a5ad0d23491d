"""Theory's parsing rules as Spark column expressions, one flag column per rule.

Each trace column becomes a parsed value and, per rule kind of
:data:`theory.data.schema.RULES`, a boolean flag, exactly as
:func:`theory.data.parse.parse_column` parses it: the integer targets (ranges, temporal
or not) come from :data:`theory.data.schema.INT_TARGETS`, the string patterns from
:mod:`theory.data.text`, the rule order from :func:`theory.data.schema.row_rules`. They
run in the JVM, so validating a large trace costs no Python worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_backend.traces.files import NOT_UTF8, FileGroup
from theory.data.errors import TraceError, unsupported_type_error
from theory.data.schema import COLUMNS, INT_TARGETS, KEY, IntTarget, Rule, row_rules
from theory.data.text import DECIMAL_TEXT, INF_TEXT, INT_TEXT, NAN_TEXT
from theory.time import DAY, MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = ["ParsedFrame", "any_of", "csv_key_kinds", "parse_frame"]

#: Theory's patterns, anchored for Java's regular expressions.
_INT_RE: Final[str] = f"^(?:{INT_TEXT})$"
_DECIMAL_RE: Final[str] = f"^(?:{DECIMAL_TEXT})$"
_NAN_RE: Final[str] = f"(?i)^(?:{NAN_TEXT})$"
_INF_RE: Final[str] = f"(?i)^(?:{INF_TEXT})$"
#: The ISO-8601 forms Python's ``datetime.fromisoformat`` (theory's parser) accepts.
_ISO_RE: Final[str] = (
    r"^\d{4}-\d{2}-\d{2}([T ]\d{2}(:\d{2}(:\d{2}([.,]\d{1,9})?)?)?)?"
    r"(Z|z|[+-]\d{2}(:?\d{2}(:?\d{2})?)?)?$"
)
_TRIM_RE: Final[str] = r"(?U)^\s+|\s+$"

Flags = dict[str, Column]
Parsed = tuple[Column, Flags]


def any_of(cols: Sequence[Column]) -> Column:
    """True where any of ``cols`` is true (nulls count as false)."""
    out: Column = F.lit(False)
    for c in cols:
        out = out | F.coalesce(c, F.lit(False))
    return out


@dataclass
class ParsedFrame:
    """A group's rows parsed: raw columns as ``_raw_<c>``, parsed columns, flags
    ``_bad_<i>`` (the flag of ``rules[i]``), :data:`~spark_backend.traces.files.NOT_UTF8`,
    and ``_file``, ``_blk``, ``_mid``."""

    df: DataFrame
    rules: list[Rule]
    columns: list[str]  # trace columns present

    def bad_flags(self) -> list[Column]:
        return [F.col(f"_bad_{i}") for i in range(len(self.rules))]


def parse_frame(
    df: DataFrame,
    g: FileGroup,
    key_kind: dict[int, str],
    require_causal: bool,
    path: str,
) -> ParsedFrame:
    """Parse the trace columns of ``df`` (the rows of group ``g``, first file ``path``)."""
    present = [c for c in df.columns if c in COLUMNS]
    types = {f.name: f.dataType for f in df.schema.fields}
    df = _prepare_strings(df, [c for c in present if isinstance(types[c], T.StringType)])
    parsed = {c: _parse(c, types[c], g, key_kind, path) for c in present}

    def causal() -> Column:
        (ev, ef), (av, af) = parsed["event_time"], parsed["arrival_time"]
        return ~any_of([*ef.values(), *af.values()]) & (av < ev)

    flags = row_rules({c: f for c, (_, f) in parsed.items()}, causal if require_causal else None)
    out = df.select(
        *[F.col(f"`{c}`").alias(f"_raw_{c}") for c in present],
        *[parsed[c][0].alias(c) for c in present],
        *[F.coalesce(f, F.lit(False)).alias(f"_bad_{i}") for i, (_, f) in enumerate(flags)],
        NOT_UTF8,
        "_file",
        "_blk",
        "_mid",
    )
    return ParsedFrame(out, [r for r, _ in flags], present)


def _parse(c: str, dtype: T.DataType, g: FileGroup, key_kind: dict[int, str], path: str) -> Parsed:
    raw = F.col(f"`{c}`")
    if c == "key":
        return _key(raw, dtype, g, key_kind, path)
    if c == "value":
        return _value(c, raw, dtype, path)
    return _int_column(c, raw, dtype, INT_TARGETS[c], path)


def _unsupported(column: str, dtype: T.DataType, path: str | None) -> TraceError:
    return unsupported_type_error(column, dtype.simpleString(), path)


# --------------------------------------------------------------------------- strings

# String columns are parsed in two steps so that Spark generates small code: first the
# trimmed text, its class and its candidate values as columns (``_prepare_strings``),
# then the values and rule flags from those columns.
_NULL, _INT, _NAN, _INF, _NUM, _ISO, _OTHER = range(7)


def _trimmed(raw: Column) -> Column:
    return F.regexp_replace(raw, _TRIM_RE, "")


def _prepare_strings(df: DataFrame, strings: list[str]) -> DataFrame:
    """Add ``_s_c`` (trimmed), ``_k_c`` (class), ``_i_c``/``_d_c``/``_t_c`` (as integer,
    number, ISO time in µs) for each string column ``c``."""
    if not strings:
        return df
    df = df.select("*", *[_trimmed(F.col(f"`{c}`")).alias(f"_s_{c}") for c in strings])
    df = df.select("*", *[_string_class(c).alias(f"_k_{c}") for c in strings])
    return df.select("*", *[x for c in strings for x in _string_candidates(c)])


def _string_class(c: str) -> Column:
    s = F.col(f"_s_{c}")
    return (
        F.when(F.col(f"`{c}`").isNull() | (s == F.lit("")), _NULL)
        .when(s.rlike(_INT_RE), _INT)
        .when(s.rlike(_NAN_RE), _NAN)
        .when(s.rlike(_INF_RE), _INF)
        .when(s.rlike(_DECIMAL_RE), _NUM)
        .when(s.rlike(_ISO_RE), _ISO)
        .otherwise(_OTHER)
    )


def _string_candidates(c: str) -> list[Column]:
    s, k = F.col(f"_s_{c}"), F.col(f"_k_{c}")
    return [
        F.when(k == _INT, s.try_cast("long")).alias(f"_i_{c}"),
        F.when(k.isin(_INT, _NUM, _NAN, _INF), s.try_cast("double")).alias(f"_d_{c}"),
        F.when(k == _ISO, F.unix_micros(F.try_to_timestamp(s))).alias(f"_t_{c}"),
    ]


def _ints_from_string(c: str, t: IntTarget) -> Parsed:
    """Integers, then numbers, then (temporal targets) ISO-8601 times, as
    :func:`theory.data.text.int_of` tries them."""
    k, iv = F.col(f"_k_{c}"), F.col(f"_i_{c}")
    is_int = k == _INT
    int_out = is_int & (iv.isNull() | (iv < F.lit(t.lo)) | (iv > F.lit(t.hi)))
    is_num = k == _NUM
    dv, dflags = _ints_from_double(F.col(f"_d_{c}"), t)
    tv, is_time, t_out, unparseable = _iso_times(c, t)
    value = F.when(is_int & ~int_out, iv).when(is_num, dv).when(is_time & ~t_out, tv)
    flags = {
        "null": k.isin(_NULL, _NAN),
        "unparseable": unparseable,
        "not_integer": is_num & dflags["not_integer"],
        "out_of_range": int_out | (k == _INF) | (is_num & dflags["out_of_range"]) | t_out,
    }
    return value.cast("long"), flags


def _iso_times(c: str, t: IntTarget) -> tuple[Column, Column, Column, Column]:
    """(µs, is a time, out of range, unparseable) of the ISO-8601 strings of ``c``."""
    k = F.col(f"_k_{c}")
    if not t.temporal:
        return F.lit(None).cast("long"), F.lit(False), F.lit(False), k.isin(_ISO, _OTHER)
    tv = F.col(f"_t_{c}")
    is_time = (k == _ISO) & tv.isNotNull()
    t_out = is_time & ((tv < F.lit(t.lo)) | (tv > F.lit(t.hi)))
    return tv, is_time, t_out, (k == _OTHER) | ((k == _ISO) & tv.isNull())


# --------------------------------------------------------------------------- integers


def _ints_from_long(v: Column, t: IntTarget) -> Parsed:
    null = v.isNull()
    out = ~null & ((v < F.lit(t.lo)) | (v > F.lit(t.hi)))
    return v.cast("long"), {"null": null, "out_of_range": out}


def _ints_from_double(d: Column, t: IntTarget) -> Parsed:
    """As theory's float parsing: NaN is null, non-integral values are not integers."""
    null = d.isNull() | F.isnan(d)
    out = ~null & (
        (d == F.lit(float("inf")))
        | (d == F.lit(float("-inf")))
        | (d < F.lit(float(t.lo)))
        | (d > F.lit(float(t.hi)))
        | (d >= F.lit(2.0**63))
        | (d < F.lit(-(2.0**63)))
    )
    nonint = ~null & ~out & (d != F.rint(d))
    ok = ~(null | out | nonint)
    ints = F.when(ok, d.try_cast("long"))
    out2 = ok & ((ints < F.lit(t.lo)) | (ints > F.lit(t.hi)))
    return ints, {"null": null, "not_integer": nonint, "out_of_range": out | out2}


_INTEGER_TYPES = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


def _int_column(
    name: str, raw: Column, dtype: T.DataType, t: IntTarget, path: str | None
) -> Parsed:
    if isinstance(dtype, T.NullType):
        return F.lit(None).cast("long"), {"null": F.lit(True)}
    if isinstance(dtype, _INTEGER_TYPES):
        return _ints_from_long(raw.cast("long"), t)
    if isinstance(dtype, T.DecimalType) and dtype.scale == 0 and dtype.precision >= 20:
        return _unsigned_longs(raw, t)
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        return _ints_from_double(raw.cast("double"), t)
    if t.temporal and isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        return _ints_from_long(F.unix_micros(raw.cast("timestamp")), t)
    if t.temporal and isinstance(dtype, T.DateType):
        return _dates(raw, t)
    if isinstance(dtype, T.StringType):
        return _ints_from_string(name, t)
    raise _unsupported(name, dtype, path)


def _unsigned_longs(raw: Column, t: IntTarget) -> Parsed:
    """Parquet UINT64 arrives as decimal(20, 0); above 2**63 - 1 is out of range."""
    v = raw.try_cast("long")
    value, flags = _ints_from_long(v, t)
    flags["null"] = raw.isNull()
    flags["out_of_range"] = ~raw.isNull() & (v.isNull() | flags["out_of_range"])
    return value, flags


def _dates(raw: Column, t: IntTarget) -> Parsed:
    """Dates as µs at midnight UTC."""
    days = F.unix_date(raw).cast("long")
    ok = days.between(F.lit(MIN_TIMESTAMP // DAY + 1), F.lit(MAX_TIMESTAMP // DAY))
    value, flags = _ints_from_long(F.when(ok, days * F.lit(DAY)), t)
    flags["out_of_range"] = ~raw.isNull() & (~ok | flags["out_of_range"])
    flags["null"] = raw.isNull()
    return value, flags


# --------------------------------------------------------------------------- values


def _value(name: str, raw: Column, dtype: T.DataType, path: str | None) -> Parsed:
    if isinstance(dtype, T.NullType):
        return F.lit(None).cast("double"), {"null": F.lit(True)}
    if isinstance(dtype, (*_INTEGER_TYPES, T.FloatType, T.DoubleType)):
        v = raw.cast("double")
        null = raw.isNull()
        return v, {"null": null, "not_finite": ~null & _not_finite(v)}
    if isinstance(dtype, T.StringType):
        k, v = F.col(f"_k_{name}"), F.col(f"_d_{name}")
        return v, {
            "null": k == _NULL,
            "unparseable": k.isin(_ISO, _OTHER),
            "not_finite": k.isin(_INT, _NAN, _INF, _NUM) & _not_finite(v),
        }
    raise _unsupported(name, dtype, path)


def _not_finite(v: Column) -> Column:
    return F.isnan(v) | (F.abs(v) == F.lit(float("inf")))


# --------------------------------------------------------------------------- keys


def _key(
    raw: Column, dtype: T.DataType, g: FileGroup, key_kind: dict[int, str], path: str
) -> Parsed:
    """Keys: bigint or string. A CSV file's keys are integers when all look like integers,
    numbers when all look like numbers (integral ones become ints), else strings: the
    types pyarrow infers for that file. Mixed int and str files give strings."""
    if isinstance(dtype, T.StringType) and g.fmt == "parquet":
        return raw, {"null": raw.isNull()}
    if not isinstance(dtype, T.StringType):
        return _int_column("key", raw, dtype, KEY, path)
    idx = [i for i, _ in g.files]
    kinds = {key_kind.get(i, "int") for i in idx}
    if kinds == {"str"}:
        return raw, {"null": raw.isNull()}
    value, num_flags = _ints_from_string("key", KEY)
    num_flags["unparseable"] = F.lit(False)  # a file with such keys has string keys
    if "str" not in kinds:
        return value, num_flags
    is_str = F.col("_file").isin(*[i for i in idx if key_kind.get(i) == "str"])
    flags = {k: F.when(is_str, F.lit(False)).otherwise(v) for k, v in num_flags.items()}
    flags["null"] = F.when(is_str, raw.isNull()).otherwise(num_flags["null"])
    return F.when(is_str, raw).otherwise(value.cast("string")), flags


def csv_key_kinds(groups: list[FileGroup], dfs: list[DataFrame]) -> dict[int, str]:
    """Per CSV file with a key column: 'int', 'num' or 'str' (pyarrow's inference).
    Runs a Spark job per such group."""
    kinds: dict[int, str] = {}
    for g, df in zip(groups, dfs, strict=True):
        if g.fmt != "csv" or "key" not in df.columns:
            continue
        s = _trimmed(F.col("key"))
        given = F.col("key").isNotNull() & (s != F.lit(""))
        non_int = given & ~s.rlike(_INT_RE)
        non_num = non_int & ~s.rlike(_DECIMAL_RE) & ~s.rlike(_NAN_RE) & ~s.rlike(_INF_RE)
        rows = (
            df.groupBy("_file")
            .agg(
                F.sum(F.when(non_int, 1).otherwise(0)).alias("non_int"),
                F.sum(F.when(non_num, 1).otherwise(0)).alias("non_num"),
            )
            .collect()
        )
        for r in rows:
            kind = "int" if not r["non_int"] else ("num" if not r["non_num"] else "str")
            kinds[int(r["_file"])] = kind
    return kinds
