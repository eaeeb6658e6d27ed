"""Images and documents count as the Messages API counts them (memoryd/media.py): sizes
read from real PNG, JPEG, GIF and WebP headers, the API's resize and formula, PDF pages
from real files; a truncated, lying or unreadable header is the fixed estimate, never a
traceback; ``memoryd status`` counts a conversation with a screenshot, a photo or a PDF
within 2x of the API's figure and says what share its media hold."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli
from conftest import WorkspaceFactory, make_message
from media_files import (
    b64,
    encoded,
    handwritten_pdf,
    image_block,
    jpeg_behind_exif,
    object_stream_pdf,
    pdf_block,
    pillow_pdf,
    screenshot,
)

from memoryd.conversation.lines import split_lines
from memoryd.media import (
    IMAGE_FIXED_TOKENS,
    PDF_PAGE_TOKENS,
    base64_image,
    image_tokens,
    measure,
    pdf_pages,
)
from memoryd.tokens import estimate_message_tokens


def api_image_tokens(width: int, height: int) -> float:
    """The API's figure, written out from its documentation: shrink to a long edge of
    1568 px and to 1.15 megapixels, keeping the aspect ratio; then width * height / 750."""
    scale = min(1.0, 1568 / max(width, height), math.sqrt(1_150_000 / (width * height)))
    return (width * scale) * (height * scale) / 750


@pytest.mark.parametrize(
    ("fmt", "options", "name"),
    [
        ("PNG", {}, "png"),
        ("JPEG", {}, "jpeg"),
        ("JPEG", {"progressive": True}, "jpeg"),
        ("GIF", {}, "gif"),
        ("WEBP", {}, "webp"),  # lossy: a VP8 chunk
        ("WEBP", {"lossless": True}, "webp"),  # a VP8L chunk
        ("WEBP", {"exif": b"Exif\x00\x00" + b"\x00" * 64}, "webp"),  # a VP8X chunk first
    ],
)
@pytest.mark.parametrize("size", [(1382, 1090), (2174, 1152), (1262, 810), (64, 48)])
def test_each_header_kind_gives_the_size_and_the_apis_tokens(
    fmt: str, options: dict[str, Any], name: str, size: tuple[int, int]
) -> None:
    data = encoded(screenshot(*size), fmt, **options)
    assert base64_image(b64(data)) == (name, *size)
    media = measure(image_block(data))
    assert media is not None and (media.kind, media.format) == ("image", name)
    assert (media.width, media.height) == size
    assert abs(media.tokens - api_image_tokens(*size)) <= 2
    assert media.tokens <= IMAGE_FIXED_TOKENS


def test_the_screenshots_cost_what_the_api_charges() -> None:
    """Three screenshots of a real session: about 1,533, 1,533 and 1,362 tokens, where
    their base64 as text would be 30 times more."""
    assert [image_tokens(2174, 1152), image_tokens(1382, 1090), image_tokens(1262, 810)] == [
        1532,
        1533,
        1363,
    ]


def test_a_jpeg_frame_header_behind_a_large_exif_block_is_found() -> None:
    data = jpeg_behind_exif(640, 480, exif_bytes=60_000)
    assert len(data) > 60_000
    assert base64_image(b64(data)) == ("jpeg", 640, 480)


def _png_header(width: int, height: int) -> bytes:
    size = width.to_bytes(4, "big") + height.to_bytes(4, "big")
    return b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + size


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(lambda: encoded(screenshot(300, 200), "PNG")[:20], id="png cut in IHDR"),
        pytest.param(lambda: encoded(screenshot(300, 200), "GIF")[:8], id="gif cut"),
        pytest.param(lambda: encoded(screenshot(300, 200), "WEBP")[:24], id="webp cut"),
        pytest.param(lambda: jpeg_behind_exif(300, 200)[:5000], id="jpeg cut before SOF"),
        pytest.param(lambda: _png_header(0, 0) + b"\x00" * 40, id="png of 0x0"),
        pytest.param(lambda: b"\xff\xd8\xff\xe0\x00\x01" + b"\x00" * 40, id="jpeg length 1"),
        pytest.param(lambda: b"\xff\xd8\x00\x00garbage" * 10, id="jpeg no marker"),
        pytest.param(lambda: b"GIF89a\x00\x00\x00\x00" + b"\x00" * 20, id="gif of 0x0"),
        pytest.param(lambda: b"hello, not an image at all" * 10, id="not an image"),
        pytest.param(lambda: b"", id="empty"),
    ],
)
def test_a_truncated_or_lying_header_is_the_fixed_estimate(data: Any) -> None:
    media = measure(image_block(data(), "image/png"))
    assert media is not None
    assert media.tokens == IMAGE_FIXED_TOKENS
    assert (media.width, media.height) == (0, 0)


def test_a_huge_declared_size_costs_no_more_than_the_apis_largest() -> None:
    """A header claiming 100,000 x 80,000 pixels is shrunk as the API would: ~1,533."""
    media = measure(image_block(_png_header(100_000, 80_000) + b"\x00" * 40))
    assert media is not None and media.width == 100_000
    assert media.tokens == image_tokens(100_000, 80_000) <= IMAGE_FIXED_TOKENS


@pytest.mark.parametrize(
    "block",
    [
        {"type": "image", "source": {"type": "url", "url": "https://example.test/a.png"}},
        {"type": "image", "source": {"type": "file", "file_id": "file_011"}},
        {"type": "image", "source": {"type": "base64", "data": "!!!not base64!!!"}},
        {"type": "image", "source": {"type": "base64", "data": 12}},
        {"type": "image", "source": "nonsense"},
        {"type": "image"},
    ],
)
def test_an_image_memoryd_cannot_see_is_the_fixed_estimate(block: dict[str, Any]) -> None:
    media = measure(block)
    assert media is not None and media.tokens == IMAGE_FIXED_TOKENS


@pytest.mark.parametrize("pages", [1, 3, 12])
def test_pdf_pages_are_counted_from_real_files(pages: int) -> None:
    assert pdf_pages(pillow_pdf(pages)) == pages
    assert pdf_pages(handwritten_pdf(pages)) == pages
    assert pdf_pages(object_stream_pdf(pages)) == pages


def test_a_pdf_document_costs_its_pages() -> None:
    media = measure({**pdf_block(handwritten_pdf(4)), "title": "report.pdf"})
    assert media is not None and (media.format, media.pages) == ("pdf", 4)
    assert media.tokens == 4 * PDF_PAGE_TOKENS + 3  # and its title as text


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"%PDF-1.4\n" + b"\x00" * 200, id="no page tree"),
        pytest.param(b"%PDF-1.4\n<< /Type /Pages /Count 999999999 >>", id="lying count"),
        pytest.param(handwritten_pdf(3)[:30], id="truncated"),
        pytest.param(b"not a pdf at all", id="not a pdf"),
        pytest.param(b"%PDF-1.5\n1 0 obj\nstream\n\x78\x9c garbage\nendstream", id="bad stream"),
    ],
)
def test_a_pdf_whose_pages_cannot_be_counted_is_one_page(data: bytes) -> None:
    media = measure(pdf_block(data))
    assert media is not None and media.tokens == PDF_PAGE_TOKENS


def test_a_text_document_counts_by_its_text() -> None:
    text = "the quarterly numbers, line by line. " * 100
    source = {"type": "text", "media_type": "text/plain", "data": text}
    block = {"type": "document", "source": source}
    media = measure(block)
    assert media is not None and media.tokens == (len(text) + 3) // 4
    inner = [{"type": "text", "text": text}, image_block(encoded(screenshot(200, 100), "PNG"))]
    content = {"type": "document", "source": {"type": "content", "content": inner}}
    media = measure(content)
    assert media is not None and media.tokens == (len(text) + 3) // 4 + image_tokens(200, 100)


def test_an_image_in_a_tool_result_is_counted_as_an_image() -> None:
    """A screenshot tool's result: the image costs its API figure, not its base64."""
    data = encoded(screenshot(1382, 1090), "PNG")
    message = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
               "content": [{"type": "text", "text": "captured"}, image_block(data)]}]}  # fmt: skip
    tokens = estimate_message_tokens(message)
    assert 1533 < tokens < 1533 + 40
    assert len(b64(data)) / 4 > 10 * tokens  # what the old estimate would have said


def status_of(folder: Path) -> dict[str, Any]:
    code, out = cli("status", "--json", str(folder))
    assert code == 0
    rows = json.loads(out)
    row: dict[str, Any] = rows[0] if isinstance(rows, list) else rows
    return row


@pytest.mark.parametrize(
    ("name", "block", "api_tokens"),
    [
        pytest.param(
            "png",
            lambda: image_block(encoded(screenshot(1382, 1090), "PNG")),
            api_image_tokens(1382, 1090),
            id="png screenshot",
        ),
        pytest.param(
            "jpeg",
            lambda: image_block(jpeg_behind_exif(2174, 1152), "image/jpeg"),
            api_image_tokens(2174, 1152),
            id="jpeg with exif",
        ),
        pytest.param(
            "pdf",
            lambda: pdf_block(pillow_pdf(5)),
            5 * 1500,  # the API's lower figure: 1,500 tokens of text a page
            id="five-page pdf",
        ),
    ],
)
def test_status_counts_a_conversation_with_media_within_2x_of_the_api(
    workspace: WorkspaceFactory, name: str, block: Any, api_tokens: float
) -> None:
    """A short conversation whose user pasted a file: its count is within 2x of what the
    API charges (text at the estimate's chars / 4), and status names the media's share."""
    question = "What is wrong in this? The build fails after the refactor of the loader."
    answer = "The loader reads the path before the config is parsed; move the read below."
    messages = [
        make_message(0, "user", [block(), {"type": "text", "text": question}]),
        make_message(1, "assistant", answer),
    ]
    folder = workspace(messages=messages)
    text_tokens = (len(question) + 3) // 4 + (len(answer) + 3) // 4 + 8
    row = status_of(folder)
    assert api_tokens / 2 <= row["tokens"] - text_tokens <= api_tokens * 2
    assert api_tokens / 2 <= row["tokens"] <= (api_tokens + text_tokens) * 2
    media = row["media"]
    kind = "documents" if name == "pdf" else "images"
    assert media[kind] == 1 and media["images" if name == "pdf" else "documents"] == 0
    assert 0.5 < media["share"] < 1
    code, table = cli("status", str(folder))
    assert code == 0
    assert f"1 {'doc' if name == 'pdf' else 'img'} ({media['share']:.0%})" in table


def test_status_of_a_conversation_without_media_says_so(workspace: WorkspaceFactory) -> None:
    row = status_of(workspace(6))
    assert row["media"] == {"images": 0, "documents": 0, "tokens": 0, "share": 0.0}
    code, table = cli("status", str(workspace(6, name="b")))
    assert code == 0 and "MEDIA" in table.splitlines()[0]


def test_status_of_broken_media_has_no_traceback(workspace: WorkspaceFactory) -> None:
    """Truncated, lying and unreadable media count as the fixed estimates; status works."""
    blocks = [
        image_block(encoded(screenshot(300, 200), "PNG")[:20]),
        image_block(_png_header(0, 0)),
        {"type": "image", "source": {"type": "base64", "data": "%%%"}},
        pdf_block(b"%PDF-1.4\n<< /Type /Pages /Count 99999999999 >>"),
        {"type": "document", "source": {"type": "url", "url": "https://example.test/a.pdf"}},
    ]
    folder = workspace(messages=[make_message(0, "user", blocks)])
    row = status_of(folder)
    assert row["media"]["images"] == 3 and row["media"]["documents"] == 2
    assert row["media"]["tokens"] == 3 * IMAGE_FIXED_TOKENS + 2 * PDF_PAGE_TOKENS


def test_the_estimate_of_a_line_counts_its_media_once() -> None:
    """The line's tokens (what every count adds up) hold the image's API figure, the text
    and the message constant, and nothing of the base64."""
    data = encoded(screenshot(800, 600), "PNG")
    message = make_message(0, "user", [image_block(data), {"type": "text", "text": "x" * 400}])
    raw = json.dumps(message).encode() + b"\n"
    (line,) = split_lines(raw, 1 << 24)
    assert line.tokens == image_tokens(800, 600) + 100 + 4
