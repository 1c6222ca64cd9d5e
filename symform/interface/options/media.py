"""``--images``, ``--videos``, ``--audio`` and ``--source-seq``: what each sequence carries beside its tokens, for models
whose towers or encoders read it.

Media are workload settings in the vocabulary (0 by default: text only): ``images``, ``image_height``,
``image_width``; ``videos``, ``video_frames``, ``video_height``, ``video_width``; ``audios``, ``audio_frames``.
Setting them on the model as conventions, rather than passing them to one evaluation, lets every command
that reads the model (flops, memory, fit, roofline, time) count the towers the same way. Each kind is
given as its processor hands it to the tower: an image and a video frame at their size after the resize,
a video's frames after sampling (Qwen3-VL samples 2 a second by default), an audio clip in mel frames
(Gemma 4: 10 ms a frame, 100 a second; each 4 frames become one audio token).

Every kind has one shape: a count and its size given together, refused for a model no cost of which
depends on them (``with_media``), read back where the count is set (``media_in``).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Callable

from ...engine.budget import quoted
from ...engine.errors import ConfigError
from .cli_args import positive_int

if TYPE_CHECKING:
    from ...engine.graph.model import Model

#: Each kind's settings, its count first, in the order commands apply and print them.
MEDIA = {
    "images": ("images", "image_height", "image_width"),
    "videos": ("videos", "video_frames", "video_height", "video_width"),
    "audio": ("audios", "audio_frames"),
    "source": ("source_seq",),  # an encoder-decoder's encoder tokens
}
VIDEO_COUNT_MISSING = "--video-frames and --video-size need --videos N (how many videos each sequence carries)"


def image_size(text: str) -> tuple[int, int]:
    """HxW in pixels (448x336), or one number for a square image (448)."""
    height, by, width = text.lower().partition("x")
    try:
        return positive_int(height), positive_int(width if by else height)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not HxW in pixels (448x336, or 448 for a square)") from None


def media_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--images", type=positive_int, metavar="N", help="images per sequence, read by the model's vision tower; their tokens are among the --seq tokens (default: none, text only)")
    p.add_argument("--image-size", type=image_size, metavar="HxW", help="each image's size in pixels as the vision tower reads it, after the processor's resize (a multiple of patch size x merge size: 448x448, or 448)")
    p.add_argument("--videos", type=positive_int, metavar="N", help="videos per sequence, read by the model's vision tower; their tokens and their frames' timestamps are among the --seq tokens (default: none)")
    p.add_argument("--video-frames", type=positive_int, metavar="F", help="frames of each video after the video processor's sampling (Qwen3-VL: 2 a second by default); each temporal_patch_size of them (2) make one temporal patch, an odd last one padded with a copy")
    p.add_argument("--video-size", type=image_size, metavar="HxW", help="each frame's size in pixels as the vision tower reads it, after the video processor's resize (a multiple of patch size x merge size: 448x256, or 448)")
    p.add_argument("--audio", dest="audios", type=positive_int, metavar="N", help="audio clips per sequence, read by the model's audio tower; their audio tokens are among the --seq tokens (default: none, text only)")
    p.add_argument("--audio-frames", type=positive_int, metavar="F", help="mel frames of each clip as the feature extractor hands them over (Gemma 4: 100 a second, a multiple of 4; 4 frames make one audio token)")
    p.add_argument("--source-seq", type=positive_int, metavar="N", help="tokens per sequence the encoder of an encoder-decoder model reads (T5's, BART's inputs); --seq is the decoder's")


def with_media(model: "Model", count: int | None, size: object, *, settings: Callable[[], dict[str, int]], count_missing: str, size_missing: str, no_tower: str) -> "Model":
    """The model with ``settings()`` (a count and its size), both given or neither; refused where the model has no
    tower that reads them."""
    if count is None and size is None:
        return model
    if count is None:
        raise ConfigError(count_missing)
    if size is None:
        raise ConfigError(size_missing)
    changed = model.with_conventions(**settings())
    if changed.expression("forward_flops").expr == model.expression("forward_flops").expr:
        raise ConfigError(no_tower)
    return changed


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


def with_videos(model: "Model", args: argparse.Namespace) -> "Model":
    """The model with the videos of --videos, --video-frames and --video-size; refused where they do not apply."""
    videos, frames, size = getattr(args, "videos", None), getattr(args, "video_frames", None), getattr(args, "video_size", None)
    if videos is None and (frames is not None or size is not None):
        raise ConfigError(VIDEO_COUNT_MISSING)
    return with_media(
        model, videos, (frames, size) if frames is not None and size is not None else None,
        settings=lambda: {"videos": videos, "video_frames": frames, "video_height": size[0], "video_width": size[1]},
        count_missing=VIDEO_COUNT_MISSING,
        size_missing="--videos needs --video-frames F (frames per video after sampling) and --video-size HxW (pixels), the video the vision tower reads",
        no_tower=f"{model.name} has no vision tower that reads videos (no cost depends on them); --videos applies to models such as qwen3_vl",
    )  # fmt: skip


def with_audio(model: "Model", args: argparse.Namespace) -> "Model":
    """The model with the clips of --audio and --audio-frames; refused where they do not apply."""
    audios, frames = getattr(args, "audios", None), getattr(args, "audio_frames", None)
    return with_media(
        model, audios, frames,
        settings=lambda: {"audios": audios, "audio_frames": frames},
        count_missing="--audio-frames needs --audio N (how many audio clips each sequence carries)",
        size_missing="--audio needs --audio-frames F (mel frames per clip, 100 a second), the length the audio tower reads",
        no_tower=f"{model.name} has no audio tower (no cost depends on audio); --audio applies to models with one, such as Gemma 4 configs with an audio_config",
    )  # fmt: skip


def reads_source(model: "Model") -> bool:
    """Whether any cost of the model depends on an encoder's source tokens (an encoder-decoder's)."""
    return "source_seq" in {s.name for s in model.expression("forward_flops").expr.free_symbols}


def with_source(model: "Model", args: argparse.Namespace) -> "Model":
    """The model with the encoder's tokens of --source-seq; refused where no cost depends on them."""
    tokens = getattr(args, "source_seq", None)
    if tokens is None:
        return model
    if not reads_source(model):
        raise ConfigError(f"{model.name} has no encoder that reads source tokens (no cost depends on them); --source-seq applies to encoder-decoder models such as t5 and bart")
    return model.with_conventions(source_seq=tokens)


def without_source(load: Callable[[argparse.Namespace], "Model"], args: argparse.Namespace) -> "Model":
    """The model ``load`` gives with --source-seq left out (and not refused)."""
    tokens, args.source_seq = getattr(args, "source_seq", None), None
    try:
        return load(args)  # args itself: the notes a load leaves on it are printed after the command
    finally:
        args.source_seq = tokens


def with_source_symbolic(load: Callable[[argparse.Namespace], "Model"], args: argparse.Namespace) -> "Model":
    """The model ``load`` gives with --source-seq left out: derive's and latex's forms keep the source's length a
    symbol, as they keep seq, and take the option as a value for their errors; refused, as elsewhere, where no cost
    reads it."""
    model = without_source(load, args)
    with_source(model, args)
    return model


def with_source_where_read(models: list["Model"], args: argparse.Namespace) -> list["Model"]:
    """--source-seq put into each of several models that reads it (a table of an encoder-decoder beside
    decoder-only models); refused where none does."""
    if getattr(args, "source_seq", None) is None or not models:
        return models
    if not any(reads_source(m) for m in models):
        with_source(models[0], args)  # the one-line refusal
    return [with_source(m, args) if reads_source(m) else m for m in models]


def with_all_media(model: "Model", args: argparse.Namespace) -> "Model":
    """The model with every kind of media the command line gives, images first (the first refusal is the one shown),
    and the encoder's tokens."""
    return with_source(with_audio(with_videos(with_images(model, args), args), args), args)


def media_in(model: "Model", names: tuple[str, ...]) -> dict[str, int]:
    """The model's settings among ``names`` where the first of them (the count) is set, else none."""
    values = {s.name: int(v) for s, v in model.conventions.items() if s.name in names}
    return values if values.get(names[0]) else {}


def all_media_in(model: "Model") -> dict[str, dict[str, int]]:
    """Each kind's settings on the model (``{"images": {...}, "videos": {}, "audio": {}}``)."""
    return {kind: media_in(model, names) for kind, names in MEDIA.items()}
