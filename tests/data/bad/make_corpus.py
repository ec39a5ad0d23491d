"""Writes the bad-input corpus beside this script (one file per case; run once, the
files are committed). ``python tests/data/bad/make_corpus.py``"""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).parent
H = "event_time,arrival_time,key,value\n"
ROWS = "".join(f"{1_000_000 * i},{1_000_000 * i + 700},k{i % 3},1.5\n" for i in range(1, 9))


def main() -> None:
    cases = {
        "dup_columns.csv": "event_time,arrival_time,event_time\n1,2,3\n",
        "ragged.csv": H + "1,2,a,1\n3,4,b,1,5,6\n5,6,c,1\n",
        "short_row.csv": H + "1,2,a,1\n3,4,b\n",
        "quoted_newline.csv": H + '1,2,"a\nb",1\n' + ROWS,
        "na_keys.csv": H + "1,2,NA,1\n3,4,null,1\n5,6,N/A,1\n7,8,nan,1\n",
        "bom.csv": "\ufeff" + H + ROWS,
        "header_space.csv": " event_time,arrival_time\n1,2\n",
        "ns_timestamps.csv": "event_time,arrival_time\n"
        "2024-01-01T00:00:00.123456789Z,2024-01-01T00:00:01.000000001Z\n",
        "far_past.csv": H + ROWS + f"{-(2**62)},1000000,k0,1\n",
        "not_a_number.csv": H + "1,2,a,1\n3,soon,b,1\n",
        "early_arrival.csv": H + ROWS + "9000000,8000000,k1,1\n",
        "window_overflow.csv": "event_time,arrival_time\n9223372036854000000,9223372036854000001\n",
    }
    for name, text in cases.items():
        (HERE / name).write_text(text, encoding="utf-8")
    (HERE / "non_utf8.csv").write_bytes(H.encode() + b"1,2,\xff\xfe,1\n")
    (HERE / "empty.csv").write_bytes(b"")
    (HERE / "header_only.csv").write_text(H)
    names = HERE / "names"
    names.mkdir(exist_ok=True)
    for i, name in enumerate(["a b.csv", "p%41.csv", "é ü.csv", "h#1.csv", "plus+.csv"]):
        (names / name).write_text(H + f"{i + 1},{i + 10},k{i},1\n", encoding="utf-8")
    ns = pa.timestamp("ns", tz="UTC")
    pq.write_table(
        pa.table({"event_time": pa.array([1_500, 2_999_999], ns),
                  "arrival_time": pa.array([3_000, 4_000_000], ns)}),
        HERE / "ns_tz.parquet",
    )
    pq.write_table(
        pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4]), pa.array([5, 6])],
                             names=["event_time", "arrival_time", "event_time"]),
        HERE / "dup_columns.parquet",
    )


if __name__ == "__main__":
    main()
