"""What an LLM call cost: a price table per model, and the arithmetic (pure).

Prices are US dollars per million tokens. ``input`` is the uncached input (what the API
reports as ``input_tokens``); cache writes and reads default to 1.25x and 0.1x of it,
Anthropic's published multipliers (docs/design.md#receipts). An unknown model has no
price, and its cost is None rather than a guess. Prices are bounded like the daily cost
cap, so that a cost is always a finite number (docs/design.md#spend-cap).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.10
_DATED = re.compile(r"-(?:\d{8}|latest)$")
MAX_PRICE = 1_000_000.0
"""The highest price taken, in US dollars per million tokens (the daily cost cap's bound)."""
MAX_COST_USD = 1e12
"""The highest cost of one job taken as a figure; above it (token counts no API bills)
the cost is unknown (None), never infinity."""


class ModelPrice(BaseModel):
    """``[prices."model"]``: US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    input: float = Field(ge=0, le=MAX_PRICE)
    output: float = Field(ge=0, le=MAX_PRICE)
    cache_write: float | None = Field(default=None, ge=0, le=MAX_PRICE)
    """Defaults to 1.25 x ``input``."""
    cache_read: float | None = Field(default=None, ge=0, le=MAX_PRICE)
    """Defaults to 0.1 x ``input``."""


DEFAULT_PRICES: dict[str, ModelPrice] = {
    name: ModelPrice(input=input_price, output=output_price)
    for name, input_price, output_price in (
        ("claude-opus-4-5", 5.0, 25.0),
        ("claude-opus-4-1", 15.0, 75.0),
        ("claude-opus-4", 15.0, 75.0),
        ("claude-sonnet-4-5", 3.0, 15.0),
        ("claude-sonnet-4", 3.0, 15.0),
        ("claude-haiku-4-5", 1.0, 5.0),
        ("claude-3-5-haiku", 0.80, 4.0),
    )
}
"""Built-in prices of the current Claude models; ``[prices]`` entries add or override."""


UNPRICED_BACKENDS = frozenset({"openai"})
"""Backends whose models cost nothing unless ``[prices]`` names them: an OpenAI-compatible
server is most often a local one (docs/design.md#openai-compatible)."""
FREE = ModelPrice(input=0, output=0)


def price_for(
    model: str, prices: Mapping[str, ModelPrice], backend: str | None = None
) -> ModelPrice | None:
    """The price of ``model``: configured first, then built in; a dated ID
    (``claude-haiku-4-5-20251001``) falls back to its undated name. None when unknown,
    zero when unknown on a backend of :data:`UNPRICED_BACKENDS`."""
    for name in (model, _DATED.sub("", model)):
        if name in prices:
            return prices[name]
        if name in DEFAULT_PRICES:
            return DEFAULT_PRICES[name]
    return FREE if backend in UNPRICED_BACKENDS else None


def cost_usd(
    price: ModelPrice | None,
    input_tokens: int,
    output_tokens: int,
    cache_creation_tokens: int = 0,
    cache_read_tokens: int = 0,
) -> float | None:
    """US dollars for these token counts at ``price``: None when the price is unknown, or
    when the counts are beyond any real bill (above :data:`MAX_COST_USD`); never infinite."""
    if price is None:
        return None
    write = price.cache_write if price.cache_write is not None else price.input * CACHE_WRITE_FACTOR
    read = price.cache_read if price.cache_read is not None else price.input * CACHE_READ_FACTOR
    try:
        total = (
            input_tokens * price.input
            + output_tokens * price.output
            + cache_creation_tokens * write
            + cache_read_tokens * read
        ) / 1_000_000
    except OverflowError:  # a token count beyond a double
        return None
    return round(total, 8) if math.isfinite(total) and total <= MAX_COST_USD else None
