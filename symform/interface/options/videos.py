"""``--videos N --video-frames F --video-size HxW``: the videos each sequence carries, for models whose vision tower
reads them.

Videos are workload settings (``videos``, ``video_frames``, ``video_height``, ``video_width`` in the vocabulary, 0
by default), set on the model as images are (``images.py``), so every command that reads the model counts the
tower's second call, on the videos, the same way. A video is given as the video processor hands it to the tower:
its frames after sampling (Qwen3-VL samples 2 a second by default) and their size after its resize.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ...engine.errors import ConfigError
from .cli_args import positive_int
from .images import image_size
from .media import media_in, with_media

if TYPE_CHECKING:
    from ...engine.graph.model import Model

SETTINGS = ("videos", "video_frames", "video_height", "video_width")
COUNT_MISSING = "--video-frames and --video-size need --videos N (how many videos each sequence carries)"


def video_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--videos", type=positive_int, metavar="N", help="videos per sequence, read by the model's vision tower; their tokens and their frames' timestamps are among the --seq tokens (default: none)")
    p.add_argument("--video-frames", type=positive_int, metavar="F", help="frames of each video after the video processor's sampling (Qwen3-VL: 2 a second by default); each temporal_patch_size of them (2) make one temporal patch, an odd last one padded with a copy")
    p.add_argument("--video-size", type=image_size, metavar="HxW", help="each frame's size in pixels as the vision tower reads it, after the video processor's resize (a multiple of patch size x merge size: 448x256, or 448)")


def with_videos(model: "Model", args: argparse.Namespace) -> "Model":
    """The model with the videos of --videos, --video-frames and --video-size; refused where they do not apply."""
    videos, frames, size = getattr(args, "videos", None), getattr(args, "video_frames", None), getattr(args, "video_size", None)
    if videos is None and (frames is not None or size is not None):
        raise ConfigError(COUNT_MISSING)
    return with_media(
        model, videos, (frames, size) if frames is not None and size is not None else None,
        settings=lambda: {"videos": videos, "video_frames": frames, "video_height": size[0], "video_width": size[1]},
        count_missing=COUNT_MISSING,
        size_missing="--videos needs --video-frames F (frames per video after sampling) and --video-size HxW (pixels), the video the vision tower reads",
        no_tower=f"{model.name} has no vision tower that reads videos (no cost depends on them); --videos applies to models such as qwen3_vl",
    )  # fmt: skip


def videos_in(model: "Model") -> dict[str, int]:
    """The model's video settings, where it has any videos."""
    return media_in(model, SETTINGS)
