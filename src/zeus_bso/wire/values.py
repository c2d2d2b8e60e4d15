"""The values a wire model takes: bounds, printable text, policy option markers, the base model."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

MAX_ID_LENGTH = 255
"""Longest job id, prefix or GPU model name accepted."""

JOB_ID_SUFFIX_LENGTH = 9
"""Length of the ``-<8 hex chars>`` the server appends to a prefix when it makes a job id."""

MAX_BATCH_SIZES = 1024
"""Most batch sizes one job may list."""

# Physical bounds on what a client reports, far above any real job, so that every cost the
# server computes and stores from them is finite.
MAX_POWER_W = 1e7
"""Most ``max_power`` a job may have: 10 MW, ten thousand 1 kW GPUs."""
MAX_TIME_S = 1e9
"""Most cumulative ``time`` a report may carry: about 31 years."""
MAX_ENERGY_J = 1e15
"""Most cumulative ``energy`` a report may carry: 1 PJ, about 280 GWh."""
MAX_PRECISION_LENGTH = 32
"""Most characters of a report's ``precision`` (``bf16-mixed``, ``transformer-engine``)."""
MAX_MODEL_PARAMETERS = 10**15
"""Most ``model_parameters`` a report may carry: a thousand times the largest models trained."""

INT32_MAX = 2**31 - 1
"""The largest integer a job field takes (a 32-bit signed integer, as every database stores)."""
_INT64_MAX = 2**63 - 1

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
NonNegativeFinite = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PositiveFinite = Annotated[float, Field(gt=0, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(gt=0, le=INT32_MAX)]
NonNegativeInt = Annotated[int, Field(ge=0, le=INT32_MAX)]


REFUSED_CHARACTERS: tuple[tuple[int, int], ...] = (
    (0x0000, 0x001F),  # C0 controls
    (0x007F, 0x009F),  # DEL and C1 controls
    (0x061C, 0x061C),  # Arabic letter mark
    (0x180E, 0x180E),  # Mongolian vowel separator
    (0x200B, 0x200F),  # zero-width space, non-joiner, joiner; left-to-right and right-to-left marks
    (0x2028, 0x202E),  # line and paragraph separators; bidi embeddings and overrides
    (0x2060, 0x2064),  # word joiner and invisible operators
    (0x2066, 0x2069),  # bidi isolates
    (0xFEFF, 0xFEFF),  # byte order mark (zero-width no-break space)
)
"""Code points refused in ids, names and run keys (inclusive ranges): control characters, which
PostgreSQL cannot store (NUL) or a person cannot read, and characters that hide or reorder text
(``x\\u202egnp.exe`` would show as ``xexe.png``)."""


_CLASS = "".join(
    f"\\u{low:04x}" + (f"-\\u{high:04x}" if high != low else "") for low, high in REFUSED_CHARACTERS
)
"""`REFUSED_CHARACTERS` as the inside of a regular expression's character class."""
_FIRST_REFUSED = re.compile(f"[{_CLASS}]")


def no_control_characters(value: str) -> str:
    """Refuse `REFUSED_CHARACTERS` in an id or a name, saying which character is where (one
    search of a compiled class: every stored id and name read back is validated so)."""
    found = _FIRST_REFUSED.search(value)
    if found is not None:
        code = ord(found.group())
        kind = "control" if code <= 0x9F else "invisible or text-reordering"
        raise ValueError(
            f"must not contain {kind} characters (U+{code:04X} at position {found.start()})"
        )
    return value


PRINTABLE_PATTERN = f"^[^{_CLASS}]*$"
"""`no_control_characters` as a JSON Schema pattern, so that the API's schema says it too."""


class _Printable:
    """A string without control characters: validated by `no_control_characters` (whose error
    says which character is where), described in JSON Schema by `PRINTABLE_PATTERN`."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(no_control_characters, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        described = handler(schema)
        described["pattern"] = PRINTABLE_PATTERN
        return described


Printable = _Printable()
Identifier = Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH), Printable]


class _NotUpstream:
    """`PolicyOption.upstream` of an option that upstream Zeus 0.16 has too (its default is
    upstream's) or that does not change upstream's decisions at its default."""

    def __repr__(self) -> str:
        return "NOT_UPSTREAM"


NOT_UPSTREAM: Any = _NotUpstream()


@dataclass(frozen=True, slots=True)
class PolicyOption:
    """Marks a job field as a policy option, and says once what the rest derives from it.

    Put in the field's ``Annotated`` metadata. From it come `UPSTREAM_OPTIONS` (the upstream
    preset), the job-id hashing rule (`hashed_off_default`), the ``zeus-bso simulate`` flags
    (`zeus_bso.cli`) and the documentation's policy options table. A job field without it
    describes the job (its batch sizes, target, ...), which a simulation takes from the trace.
    """

    upstream: Any = NOT_UPSTREAM
    """The value that reproduces upstream Zeus 0.16's decisions, if not the default."""
    hashed_off_default: bool = False
    """True for an option added after job ids were first hashed: an id hashes it only away from
    its default, so that a job's id stays what it was before the option existed. A new option
    must set it (a test says so), or every existing job without an id gets a new one."""
    flag: str | None = None
    """The ``simulate`` flag of a boolean, as ``--on/--off`` (default: ``--name/--no-name``)."""


class WireModel(BaseModel):
    """Base of every wire model: unknown fields are ignored, non-finite floats rejected."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


BUILT_IN_BANDITS = ("thompson", "zeus-0.16", "ucb")
"""The bandits every server has (`zeus_bso.policy.bandits.BANDITS` implements each; a test holds
the two to each other)."""

BanditName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        json_schema_extra={"examples": list(BUILT_IN_BANDITS)},
    ),
]
"""A bandit's name: one of `BUILT_IN_BANDITS`, or one installed where the policy runs (an entry
point of the ``zeus_bso.bandits`` group; the server refuses a job whose bandit it lacks)."""


def batch_sizes_in(bounds: Any, steps: str = "pow2") -> list[int]:
    """The batch sizes ``batch_size_range`` ``bounds`` makes by ``steps`` (see `_JobOptions`).

    Raises:
        ValueError: bounds that are not two positive integers, low first; steps that are not
            ``pow2`` or ``pow2_half``; a range that makes no size, or too many.
    """
    try:
        low, high = (int(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError("batch_size_range is [min, max], two positive integers") from None
    if not 0 < low <= high:
        raise ValueError(f"batch_size_range [{low}, {high}] is [min, max] with 0 < min <= max")
    if steps not in ("pow2", "pow2_half"):
        raise ValueError(f"batch_size_steps is 'pow2' or 'pow2_half', not {steps!r}")
    sizes: set[int] = set()
    power = 1
    while power <= high:
        for size in (power, power * 3 // 2) if steps == "pow2_half" and power > 1 else (power,):
            if low <= size <= high:
                sizes.add(size)
        power *= 2
    if not sizes:
        raise ValueError(f"batch_size_range [{low}, {high}] holds no size of its steps ({steps})")
    if len(sizes) > MAX_BATCH_SIZES:
        raise ValueError(f"batch_size_range makes {len(sizes)} sizes, more than {MAX_BATCH_SIZES}")
    return sorted(sizes)
