"""``--images N --image-size HxW``: the images each sequence carries, for models with a vision tower.

Images are workload settings (``images``, ``image_height``, ``image_width`` in the
vocabulary, 0 by default: text only). Setting them on the model, rather than
passing them to one evaluation, lets every command that reads the model (flops,
memory, fit, roofline, time) count the vision tower the same way.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ...engine.budget import quoted
from .cli_args import positive_int
from .media import media_in, with_media

if TYPE_CHECKING:
    from ...engine.graph.model import Model

SETTINGS = ("images", "image_height", "image_width")


def image_size(text: str) -> tuple[int, int]:
    """HxW in pixels (448x336), or one number for a square image (448)."""
    height, by, width = text.lower().partition("x")
    try:
        return positive_int(height), positive_int(width if by else height)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not HxW in pixels (448x336, or 448 for a square)") from None


def image_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--images", type=positive_int, metavar="N", help="images per sequence, read by the model's vision tower; their tokens are among the --seq tokens (default: none, text only)")
    p.add_argument("--image-size", type=image_size, metavar="HxW", help="each image's size in pixels as the vision tower reads it, after the processor's resize (a multiple of patch size x merge size: 448x448, or 448)")


def with_images(model: "Model", args: argparse.Namespace) -> "Model":
    """The model with the images of --images and --image-size; refused where they do not apply."""
    images, size = getattr(args, "images", None), getattr(args, "image_size", None)
    return with_media(
        model, images, size,
        settings=lambda: {"images": images, "image_height": size[0], "image_width": size[1]},
        count_missing="--image-size needs --images N (how many images each sequence carries)",
        size_missing="--images needs --image-size HxW (pixels), the size the vision tower reads each image at",
        no_tower=f"{model.name} has no vision tower (no cost depends on images); --images applies to vision-language models such as qwen3_vl",
    )  # fmt: skip


def images_in(model: "Model") -> dict[str, int]:
    """The model's image settings, where it has any images."""
    return media_in(model, SETTINGS)
