"""Real image and PDF files for the media tests: images drawn and encoded by Pillow (PNG,
JPEG with and without a large EXIF block, GIF, the three kinds of WebP), PDFs written by
Pillow and by hand (a classic cross-reference table, and one whose page tree lies in a
compressed object stream), and message blocks that carry them as the Messages API does."""

from __future__ import annotations

import base64
import io
import zlib
from typing import Any

from PIL import Image, ImageDraw


def screenshot(width: int, height: int) -> Image.Image:
    """A screenshot-like picture: a title bar, lines of "text", a coloured panel."""
    image = Image.new("RGB", (width, height), (246, 246, 246))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, width, 28), fill=(52, 58, 70))
    for row in range(40, height - 20, 22):
        draw.text((16, row), f"line {row // 22}: def handler(event): return event.path", fill=0)
    if width > 80 and height > 120:
        draw.rectangle((width // 2, height // 3, width - 20, height - 40), fill=(70, 130, 200))
    return image


def encoded(image: Image.Image, fmt: str, **options: Any) -> bytes:
    """``image`` as the bytes of a ``fmt`` file (Pillow's format name)."""
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def jpeg_behind_exif(width: int, height: int, exif_bytes: int = 60_000) -> bytes:
    """A JPEG whose frame header comes after an EXIF block of about ``exif_bytes``."""
    exif = Image.Exif()
    exif[0x010E] = "x" * exif_bytes  # ImageDescription
    return encoded(screenshot(width, height), "JPEG", exif=exif.tobytes())


def image_block(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": b64(data)},
    }


def pdf_block(data: bytes) -> dict[str, Any]:
    return {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": b64(data)},
    }


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def pillow_pdf(pages: int) -> bytes:
    """A ``pages``-page PDF as Pillow writes it (one screenshot a page)."""
    images = [screenshot(600, 800) for _ in range(pages)]
    return encoded(images[0], "PDF", save_all=True, append_images=images[1:])


def handwritten_pdf(pages: int) -> bytes:
    """A valid ``pages``-page PDF 1.4 with a text line a page, offsets and all."""
    kids = " ".join(f"{3 + 2 * k} 0 R" for k in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
    ]
    for k in range(pages):
        text = f"BT /F1 24 Tf 72 720 Td (Page {k + 1} of the report) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * k} 0 R "
            f"/Resources << /Font << /F1 {3 + 2 * pages} 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def object_stream_pdf(pages: int) -> bytes:
    """A PDF 1.5 whose catalog, page tree and pages are in one Flate-compressed object
    stream: no ``/Type /Page`` nor ``/Count`` is visible in its bytes."""
    kids = " ".join(f"{3 + k} 0 R" for k in range(pages))
    bodies = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    bodies.append(f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode())
    bodies += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"] * pages
    header = bytearray()
    body = bytearray()
    for number, text in enumerate(bodies, start=1):
        header += b"%d %d " % (number, len(body))
        body += text + b" "
    packed = zlib.compress(bytes(header + body))
    stream_head = b"<< /Type /ObjStm /N %d /First %d /Filter /FlateDecode /Length %d >>" % (
        len(bodies),
        len(header),
        len(packed),
    )
    return b"%%PDF-1.5\n%d 0 obj\n%s\nstream\n%s\nendstream\nendobj\n%%%%EOF\n" % (
        len(bodies) + 1,
        stream_head,
        packed,
    )
