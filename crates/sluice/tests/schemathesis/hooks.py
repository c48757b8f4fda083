"""Schemathesis hooks for Sluice's API test (loaded through SCHEMATHESIS_HOOKS).

The document names one format JSON Schema has no keyword for: `cron`, a cron expression the
broker can fire. Schemathesis is told how to make valid ones; everything else it derives from
the document alone.
"""

import schemathesis
from hypothesis import strategies as st
from hypothesis.internal import lambda_sources

_FIELDS = [
    ["*", "0", "30", "*/5", "0-30/10", "5,35"],  # minute
    ["*", "0", "12", "*/2", "9-17"],  # hour
    ["*", "1", "15", "28", "1-7"],  # day of month (never a day some month lacks)
    ["*", "1", "6", "12", "*/3"],  # month
    ["*", "0", "1-5", "6", "MON"],  # day of week
]

schemathesis.openapi.format(
    "cron",
    st.tuples(*(st.sampled_from(f) for f in _FIELDS)).map(" ".join),
)

# CPython 3.11 before 3.11.8 can fail `ast.parse` of a large module with "AST constructor
# recursion depth mismatch" (python/cpython#106905); Hypothesis parses schemathesis' own
# sources to name the lambdas of its filters, only for display. Name them plainly instead of
# failing the run.
_describe = lambda_sources.lambda_description


def _lambda_description(f):
    try:
        return _describe(f)
    except SystemError:
        return "lambda"


lambda_sources.lambda_description = _lambda_description
