"""``--audio N --audio-frames F``: the audio clips each sequence carries, for models with an audio tower.

Audio is a workload setting (``audios``, ``audio_frames`` in the vocabulary, 0 by
default: text only), set on the model as images are (``images.py``), so every
command that reads the model counts the audio tower the same way. A clip is given
in mel frames, as the feature extractor hands it to the tower (Gemma 4: 10 ms a
frame, 100 a second; each 4 frames become one audio token).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .cli_args import positive_int
from .media import media_in, with_media

if TYPE_CHECKING:
    from ...engine.graph.model import Model

SETTINGS = ("audios", "audio_frames")


def audio_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--audio", dest="audios", type=positive_int, metavar="N", help="audio clips per sequence, read by the model's audio tower; their audio tokens are among the --seq tokens (default: none, text only)")
    p.add_argument("--audio-frames", type=positive_int, metavar="F", help="mel frames of each clip as the feature extractor hands them over (Gemma 4: 100 a second, a multiple of 4; 4 frames make one audio token)")


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


def audio_in(model: "Model") -> dict[str, int]:
    """The model's audio settings, where it has any audio."""
    return media_in(model, SETTINGS)
