"""What images and documents cost in a prompt, as the Messages API counts them (pure;
docs/design.md#counting).

An image costs about ``width * height / 750`` tokens after the API shrinks it to a long
edge of at most 1568 px and at most 1.15 megapixels (so never more than about 1,600).
Width and height come from the header of the image's bytes (PNG, JPEG, GIF, WebP), read by
hand from a prefix of the base64 text (no image library, and a JPEG's frame header behind a
large EXIF block costs a few more kilobytes, never the whole payload). An image given by
URL or file id, or whose header cannot be read (truncated, not an image, a size of 0), is
counted at :data:`IMAGE_FIXED_TOKENS`, the API's largest cost.

A PDF document costs :data:`PDF_PAGE_TOKENS` a page, its pages counted from its bytes
(the page tree's ``/Count``, else its ``/Type /Page`` objects, in compressed object
streams too); a PDF whose pages cannot be counted, or one given by URL or file id, counts
as one page. A text document counts by its text, as a message's text does.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

IMAGE_MAX_EDGE = 1568
"""The API shrinks an image whose long edge is longer than this (pixels)."""
IMAGE_MAX_PIXELS = 1_150_000
"""... or whose area is larger than this."""
PIXELS_PER_TOKEN = 750
IMAGE_FIXED_TOKENS = 1_600
"""An image whose size is unknown: the most any image costs (a 1092 x 1092 square)."""
PDF_PAGE_TOKENS = 3_000
"""A PDF page: the API sends each page as its text (1,500-3,000 tokens by Anthropic's
documentation) and as an image (up to ~1,600). 3,000 is within a factor of 2 of every page in that
range, from a sparse page (~1,500) to a dense one with its image (~4,600)."""
HEADER_PREFIX = 4096
"""Base64 characters decoded first for an image's header; doubled while a JPEG's frame
header lies further in."""
MAX_PDF_STREAM = 8 << 20
"""Bytes inflated from a PDF's compressed object streams, at most, to find its pages."""

TIMES = "\N{MULTIPLICATION SIGN}"
MIN_PAGE_BYTES = 16
"""Fewer bytes than any page object of a PDF takes."""

_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG_SOF = frozenset({*range(0xC0, 0xD0)} - {0xC4, 0xC8, 0xCC})
"""Frame headers: every SOFn but DHT (C4), JPG (C8) and DAC (CC)."""
_JPEG_NO_LENGTH = frozenset({0x01, *range(0xD0, 0xD9)})
_PAGES_COUNT = re.compile(
    rb"/Type\s*/Pages\b[^>]*?/Count\s+(\d+)|/Count\s+(\d+)[^>]*?/Type\s*/Pages\b"
)
_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
_STREAM = re.compile(rb"stream\r?\n")


class Media:
    """One image or document block as the API counts it."""

    __slots__ = ("format", "height", "kind", "pages", "tokens", "width")

    def __init__(
        self,
        kind: str,
        format: str,
        tokens: int,
        width: int = 0,
        height: int = 0,
        pages: int = 0,
    ) -> None:
        self.kind = kind
        """``image`` or ``document``."""
        self.format = format
        """``png``, ``jpeg``, ``gif``, ``webp``, ``pdf``, ``text``; ``url`` or ``file`` for
        a source memoryd cannot see; ``unknown`` for bytes it cannot read."""
        self.tokens = tokens
        self.width = width
        """The image's size as sent (before the API's resize); 0 when unknown."""
        self.height = height
        self.pages = pages
        """A PDF's pages; 0 for an image or a text document."""

    def __repr__(self) -> str:
        return (
            f"Media({self.kind!r}, {self.format!r}, tokens={self.tokens}, "
            f"size={self.width}x{self.height}, pages={self.pages})"
        )

    def label(self) -> str:
        """How a placeholder names it: ``image 1382x1090 png`` (with a multiplication
        sign), ``document pdf, 12 pages``."""
        if self.kind == "image":
            size = f" {self.width}{TIMES}{self.height}" if self.width else ""
            return f"image{size} {self.format}"
        pages = f", {self.pages} page{'s' if self.pages != 1 else ''}" if self.pages else ""
        return f"document {self.format}{pages}"


def image_tokens(width: int, height: int) -> int:
    """The tokens of an image of ``width`` x ``height`` pixels after the API's resize."""
    if width <= 0 or height <= 0:
        return IMAGE_FIXED_TOKENS
    area = width * height
    scale = min(1.0, IMAGE_MAX_EDGE / max(width, height), (IMAGE_MAX_PIXELS / area) ** 0.5)
    if scale < 1.0:
        width, height = max(1, int(width * scale)), max(1, int(height * scale))
    return -(-width * height // PIXELS_PER_TOKEN)


def image_size(data: bytes) -> tuple[str, int, int] | None:
    """The format, width and height an image's first bytes declare; None when they are too
    few or not one of PNG, JPEG, GIF, WebP."""
    if data.startswith(_PNG):
        if len(data) < 24 or data[12:16] != b"IHDR":
            return None
        return "png", int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if data[:6] in (b"GIF87a", b"GIF89a"):
        if len(data) < 10:
            return None
        return "gif", int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    return None


def _webp_size(data: bytes) -> tuple[str, int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return "webp", width, height
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return "webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        width = int.from_bytes(data[26:28], "little") & 0x3FFF
        height = int.from_bytes(data[28:30], "little") & 0x3FFF
        return "webp", width, height
    return None


def _jpeg_size(data: bytes) -> tuple[str, int, int] | None:
    """A JPEG's size from its frame header (SOF), found by walking the segments that come
    before it (EXIF, ICC profiles, tables); None when the bytes end before it."""
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in _JPEG_NO_LENGTH:
            at += 2
            continue
        length = int.from_bytes(data[at + 2 : at + 4], "big")
        if length < 2:
            return None
        if marker in _JPEG_SOF:
            if at + 9 > len(data):
                return None
            height = int.from_bytes(data[at + 5 : at + 7], "big")
            width = int.from_bytes(data[at + 7 : at + 9], "big")
            return "jpeg", width, height
        if marker == 0xDA:  # the image data starts: no frame header came before it
            return None
        at += 2 + length
    return None


def _decode(text: str, end: int) -> bytes | None:
    """The bytes of the first ``end`` characters of base64 ``text`` (whole quads)."""
    chunk = text[:end]
    if end < len(text):
        chunk = chunk[: len(chunk) - len(chunk) % 4]
    try:
        return binascii.a2b_base64(chunk)
    except (binascii.Error, ValueError):
        return None


def base64_image(text: str) -> tuple[str, int, int] | None:
    """The format and size of a base64 image, decoding only as much as its header needs."""
    end = HEADER_PREFIX
    while True:
        data = _decode(text, end)
        found = image_size(data) if data is not None else None
        if found is not None or end >= len(text) or data is None:
            return found
        if not data.startswith(b"\xff\xd8"):
            return None  # only a JPEG's header can lie further in
        end *= 8


def pdf_pages(data: bytes) -> int | None:
    """The pages of a PDF: the largest ``/Count`` of a ``/Type /Pages`` node (the root's
    is the total), else its ``/Type /Page`` objects, looked for in the file and in its
    compressed streams (object streams hide both); None when neither is found."""
    if not data.startswith(b"%PDF"):
        return None
    found = _pages_in(data)
    if found is not None:
        return found
    import zlib  # only for a PDF whose page tree is compressed

    inflated: list[bytes] = []
    budget = MAX_PDF_STREAM
    for match in _STREAM.finditer(data):
        if budget <= 0:
            break
        try:
            inflater = zlib.decompressobj()
            chunk = inflater.decompress(data[match.end() :], budget)
        except zlib.error:
            continue
        budget -= len(chunk)
        inflated.append(chunk)
    return _pages_in(b"\n".join(inflated))


def _pages_in(data: bytes) -> int | None:
    """Pages named in ``data``; a ``/Count`` larger than the bytes could hold (a page
    object takes more than :data:`MIN_PAGE_BYTES`) is not believed."""
    counts = [int(a or b) for a, b in _PAGES_COUNT.findall(data)]
    if counts and 0 < max(counts) <= max(1, len(data) // MIN_PAGE_BYTES):
        return max(counts)
    pages = len(_PAGE.findall(data))
    return pages or None


def _text_tokens(text: object) -> int:
    return (len(text) + 3) // 4 if isinstance(text, str) else 0


def measure(block: Mapping[str, Any]) -> Media | None:
    """An ``image`` or ``document`` block as the API counts it; None for any other block."""
    kind = block.get("type")
    if kind not in ("image", "document"):
        return None
    source = block.get("source")
    source = source if isinstance(source, Mapping) else {}
    source_type = source.get("type")
    if kind == "image":
        data = source.get("data")
        if source_type == "base64" and isinstance(data, str):
            found = base64_image(data)
            if found is not None and found[1] > 0 and found[2] > 0:
                name, width, height = found
                return Media("image", name, image_tokens(width, height), width, height)
            return Media("image", "unknown", IMAGE_FIXED_TOKENS)
        where = source_type if source_type in ("url", "file") else "unknown"
        return Media("image", where, IMAGE_FIXED_TOKENS)
    extra = _text_tokens(block.get("title")) + _text_tokens(block.get("context"))
    return _document(source, source_type, extra)


def _document(source: Mapping[str, Any], source_type: object, extra: int) -> Media:
    data = source.get("data")
    if source_type == "text":
        return Media("document", "text", _text_tokens(data) + extra)
    if source_type == "content":
        content = source.get("content")
        tokens = _text_tokens(content) if isinstance(content, str) else 0
        for item in content if isinstance(content, list) else ():
            if isinstance(item, Mapping):
                inner = measure(item)
                tokens += inner.tokens if inner else _text_tokens(item.get("text"))
        return Media("document", "text", tokens + extra)
    if source_type == "base64" and isinstance(data, str):
        raw = _decode(data, len(data))
        pages = pdf_pages(raw) if raw is not None else None
        if pages is not None:
            return Media("document", "pdf", pages * PDF_PAGE_TOKENS + extra, pages=pages)
        return Media("document", "unknown", PDF_PAGE_TOKENS + extra)
    where = source_type if source_type in ("url", "file") else "unknown"
    return Media("document", str(where), PDF_PAGE_TOKENS + extra)


def media_in(content: Any) -> list[Media]:
    """Every image and document of a message's content, those inside tool results too."""
    found: list[Media] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping):
            continue
        media = measure(block)
        if media is not None:
            found.append(media)
        elif block.get("type") == "tool_result":
            found += media_in(block.get("content"))
    return found
