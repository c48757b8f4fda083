"""Schemathesis hooks for Sluice's API test (loaded through SCHEMATHESIS_HOOKS).

The document names one format JSON Schema has no keyword for: `cron`, a cron expression the
broker can fire. Schemathesis is told how to make valid ones, and how to keep the rules between
fields of a queue's `adaptive` setting and of a rate limit's `burst`; everything else it
derives from the document alone.
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


# Two rules of a queue's `adaptive` setting compare fields with each other, which no JSON
# Schema keyword states: `min_per_min` and `increase_per_min` are at most `max_per_min` (the
# document says so in words). A generated body that breaks only them is made to keep them;
# values out of their own ranges are left as drawn, so invalid bodies stay invalid.
_MAX_PER_MIN = 60_000_000


def _per_min(v):
    # JSON integers may come as `12.0`, which the broker reads as 12.
    whole = isinstance(v, int) or (isinstance(v, float) and v.is_integer())
    return whole and not isinstance(v, bool) and 1 <= v <= _MAX_PER_MIN


def _keep_burst(rate):
    # A rate limit's `burst` is at most its `limit`, which no keyword states either.
    if isinstance(rate, dict):
        limit, burst = rate.get("limit"), rate.get("burst")
        if _per_min(limit) and _per_min(burst) and burst > limit:
            rate["burst"] = limit


@schemathesis.hook
def map_body(ctx, body):
    if isinstance(body, dict):
        _keep_burst(body.get("rate_limit"))
        _keep_burst(body.get("rate"))
    adaptive = body.get("adaptive") if isinstance(body, dict) else None
    if not isinstance(adaptive, dict):
        return body
    lo, hi = adaptive.get("min_per_min"), adaptive.get("max_per_min")
    if _per_min(lo) and _per_min(hi) and lo > hi:
        adaptive["min_per_min"], adaptive["max_per_min"] = hi, lo
    hi = adaptive.get("max_per_min")
    step = adaptive.get("increase_per_min")
    if _per_min(hi) and _per_min(step) and step > hi:
        adaptive["increase_per_min"] = hi
    return body
