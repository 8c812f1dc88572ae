"""``clef-agents train | train-reader | reader-records | calibrate | teach | taught | eval`` (and, from their own
modules, ``gate-records``, ``choose-reader`` and ``model-card``).

Example:
    $ clef-agents train --out runs/mini --steps 3000 --name mini
    $ clef-agents train-reader --out runs/reader --model mini
    $ clef-agents reader-records --out staged/reader_train.jsonl --per-set 6000 --exclude banking77
    $ clef-agents calibrate --model runs/mini/final --records valid.jsonl --out runs/mini/recalibrated
    $ clef-agents eval --model mini --datasets banking77 sms_spam --report-dir reports/mini
    $ clef-agents teach --model mini --records my_labelled.jsonl --out runs/mini-taught
    $ clef-agents taught --model runs/mini-taught
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from clef_agents.train.model_card import kept_parts


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the train, calibrate and eval subcommands."""
    train = subparsers.add_parser("train", help="train LoRA + head on decision records (background-friendly)")
    train.add_argument("--out", required=True, help="run folder (resumable; final checkpoint in OUT/final)")
    train.add_argument(
        "--records", nargs="*", default=None, help="JSONL decision records; default: the mini mixture of ../shared/data"
    )
    train.add_argument("--valid-records", nargs="*", default=None, help="held-out JSONL records for calibration")
    train.add_argument(
        "--exclude", nargs="*", default=[], help="datasets to leave out of the mixture (e.g. banking77 for zero-shot)"
    )
    train.add_argument(
        "--backbone",
        default="minilm",
        help="backbone to put LoRA and the head on: 'minilm' or a folder (default minilm)",
    )
    train.add_argument("--name", default="mini", help="model name stored in the checkpoint (default mini)")
    train.add_argument("--steps", type=int, default=3000, help="optimiser steps (default 3000)")
    train.add_argument("--batch-size", type=int, default=32, help="records per step (default 32)")
    train.add_argument("--seed", type=int, default=0, help="seed of sampling and initialisation (default 0)")
    train.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch (default: 1, or $CLEF_AGENTS_THREADS; bench/threads/results.md)",
    )
    train.add_argument(
        "--stage",
        choices=["full", "adapter", "head", "match"],
        default="full",
        help="full: LoRA + head; adapter: LoRA alone, through probes on pooled states (train the head after);"
        " head / match: the head (or its pooled part) on cached states",
    )
    train.add_argument(
        "--init", default=None, help="start from this checkpoint's adapter and head (e.g. a full-stage run)"
    )
    train.add_argument("--state-cache", default=None, help="file that keeps the cached states between head/match runs")
    train.add_argument("--lr-head", type=float, default=None, help="learning rate of the head (default 1e-3)")
    train.add_argument(
        "--lora-layers",
        nargs="+",
        default=None,
        metavar="N|all",
        help="layers that get LoRA (indices, or 'all'; default: the top half, or --init's)",
    )
    train.add_argument(
        "--lora-targets",
        nargs="+",
        default=None,
        metavar="SUFFIX",
        help="module name suffixes that get LoRA (e.g. query key value dense; default: the attention"
        " query/value projections, or --init's); with --init, its adapter weights load into the"
        " modules both have and the others start as no change",
    )
    train.add_argument("--no-calibrate", action="store_true", help="skip fitting calibration at the end")
    train.add_argument("--no-resume", action="store_true", help="start over even if OUT holds a saved run")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.set_defaults(func=_run_train)

    calibrate = subparsers.add_parser(
        "calibrate",
        help="refit probability calibration on labelled records (the head's, and the question reader's temperature "
        "for the questions it answers), or fit lane thresholds (--max-auto-error)",
    )
    calibrate.add_argument(
        "--model",
        default=None,
        help="probability calibration: the checkpoint folder or 'mini' to refit; lane thresholds: the "
        "model that answers records without meta.probabilities, any spec of clef_agents.load_model "
        "(default mini)",
    )
    calibrate.add_argument(
        "--records", nargs="+", required=True, help="labelled JSONL decision records (one or more files)"
    )
    calibrate.add_argument(
        "--out", default=None, help="folder for the recalibrated checkpoint (probability calibration)"
    )
    from clef_agents.thresholds.cli import add_lane_arguments

    add_lane_arguments(calibrate)
    calibrate.set_defaults(func=_run_calibrate)

    teach = subparsers.add_parser(
        "teach", help="fit per-question option weights from labelled records (minutes on a CPU; no retraining)"
    )
    teach.add_argument("--model", default="mini", help="checkpoint folder or 'mini'")
    teach.add_argument("--records", nargs="*", default=None, help="labelled JSONL decision records")
    teach.add_argument(
        "--valid-records",
        nargs="*",
        default=None,
        help="held-out records for the blend (default: exactly 10%% of --records, seeded, "
        "spread over questions and labels)",
    )
    teach.add_argument(
        "--datasets", nargs="*", default=None, help="shared data sets to teach from (their train and valid splits)"
    )
    teach.add_argument("--out", required=True, help="folder for the taught checkpoint")
    teach.add_argument(
        "--min-records",
        type=int,
        default=20,
        help="fewest records a question needs to fit on (default 20); it also needs max(5, this/4) "
        "held out and two labels seen",
    )
    teach.add_argument(
        "--prior",
        nargs="*",
        default=[],
        metavar="LABEL=SHARE",
        help="expected deployment share of a label when it differs from the records' (e.g. oos=0.2)",
    )
    teach.add_argument(
        "--features",
        nargs="+",
        default=None,
        metavar="SPEC",
        help="state features to fit each question on, the lower held-out NLL kept "
        "('meanK' or 'meanK+max'; default: mean4+max mean1)",
    )
    teach.add_argument(
        "--no-lexical",
        action="store_true",
        help="do not add the TF-IDF word model to any question's blend (by default it joins where it "
        "lowers the held-out NLL by 1%% or more)",
    )
    teach.add_argument(
        "--identifier-words",
        action="store_true",
        help="the word model reads identifiers as words (listSharedLinks and list_shared_links as 'list shared links'): "
        "for states holding tool names and arguments",
    )
    teach.add_argument(
        "--no-neighbours",
        action="store_true",
        help="do not add the nearest-taught-records vote to any question's blend (by default it joins "
        "where it lowers the held-out NLL by 1%% or more)",
    )
    teach.add_argument(
        "--catch-all",
        nargs="*",
        default=[],
        metavar="LABEL",
        help="labels that mean 'none of these' (e.g. oos): on such an option, how unlike the other "
        "options' records a state is joins the blend where it lowers the held-out NLL by 1%% or more",
    )
    teach.add_argument(
        "--no-tool-match",
        action="store_true",
        help="do not add the request-tool match to yes/no questions whose states list tools as JSON "
        "lines (by default it joins where it lowers the held-out NLL by 1%% or more)",
    )
    teach.add_argument(
        "--no-refit",
        action="store_true",
        help="keep the parts fitted without the held-out records (by default, once every choice is "
        "made on them, the parts are fitted again on all records)",
    )
    teach.add_argument("--seed", type=int, default=0, help="seed of the held-out draw and of the fits (default 0)")
    teach.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch (default: 1, or $CLEF_AGENTS_THREADS; bench/threads/results.md)",
    )
    teach.add_argument("--no-progress", action="store_true", help="no progress bars")
    teach.set_defaults(func=_run_teach)

    taught = subparsers.add_parser(
        "taught",
        help="list what a checkpoint was taught: each question's type, wording, options and held-out figures",
        description="List the questions a checkpoint was taught (clef-agents teach), read from its taught.json: a "
        "request uses the taught weights when it asks the same type and wording with taught option names, or "
        "rewords a choice question with the same options (close enough in embedding: model.taught.REWORDED_TOLERANCE).",
    )
    taught.add_argument("--model", default="mini", help="checkpoint folder or 'mini' (default mini)")
    taught.add_argument(
        "--json", action="store_true", help="print the list as JSON (every option name, the wording in full)"
    )
    taught.set_defaults(func=_run_taught)

    reader = subparsers.add_parser(
        "train-reader",
        help="train the question reader that answers untaught questions (one pass over question, options and state)",
    )
    reader.add_argument(
        "--out", required=True, help="run folder: OUT/last every --save-every steps, OUT/final (calibrated) at the end"
    )
    reader.add_argument(
        "--model",
        default=None,
        help="also write OUT/model: this checkpoint ('mini' or a folder) with the reader attached",
    )
    reader.add_argument("--steps", type=int, default=2300, help="optimiser steps (default 2300)")
    reader.add_argument("--batch-size", type=int, default=32, help="one-question records per step (default 32)")
    reader.add_argument(
        "--lr", type=float, default=6e-5, help="learning rate of the encoder layers (default 6e-5; heads 1e-3)"
    )
    reader.add_argument(
        "--per-set",
        type=int,
        default=3000,
        help="rows drawn per data set, each made into several questions (default 3000)",
    )
    reader.add_argument("--max-tokens", type=int, default=256, help="tokens in one pass (default 256)")
    reader.add_argument(
        "--exclude",
        nargs="*",
        default=["banking77"],
        help="data sets left out (default: banking77, the intent family's leave-one-out target)",
    )
    reader.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop training after this long (the checkpoint is written, then calibrated)",
    )
    reader.add_argument(
        "--data-version",
        type=int,
        choices=[1, 2, 3],
        default=2,
        help="recipe of clef_agents.train.reader_data (1: the first run's; 2, the default: balanced yes/no, more ladders; 3: 2 plus the written reading questions)",
    )
    reader.add_argument(
        "--init", default=None, help="continue from this reader folder (e.g. an earlier run's OUT/final)"
    )
    reader.add_argument(
        "--save-every", type=int, default=250, help="steps between checkpoints in OUT/last (default 250)"
    )
    reader.add_argument(
        "--keep-every",
        type=int,
        default=None,
        metavar="STEPS",
        help="also keep OUT/step<N> every this many steps, to choose a checkpoint afterwards (default: none)",
    )
    reader.add_argument(
        "--seed", type=int, default=0, help="seed of the data draw, order and initialisation (default 0)"
    )
    reader.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch (default: 1, or $CLEF_AGENTS_THREADS; bench/threads/results.md)",
    )
    reader.add_argument("--no-progress", action="store_true", help="no progress bar")
    reader.add_argument(
        "--records",
        nargs="*",
        default=None,
        help="staged one-question records (JSONL from 'clef-agents reader-records') instead of a draw from the data sets",
    )
    reader.add_argument(
        "--valid-records",
        nargs="*",
        default=None,
        help="staged validation records for the calibration written with OUT/final",
    )
    reader.add_argument(
        "--device",
        default=None,
        help="torch device, e.g. cuda or cpu (default: CUDA when there is one; $CLEF_AGENTS_DEVICE overrides)",
    )
    reader.set_defaults(func=_run_train_reader)

    staged = subparsers.add_parser(
        "reader-records",
        help="write the question reader's one-question records to JSONL, to train elsewhere (train-reader --records)",
    )
    staged.add_argument("--out", required=True, help="JSONL file to write")
    staged.add_argument(
        "--split", choices=["train", "valid"], default="train", help="rows of this split (default train)"
    )
    staged.add_argument("--per-set", type=int, default=3000, help="rows drawn per data set (default 3000)")
    staged.add_argument(
        "--exclude", nargs="*", default=["banking77"], help="data sets to leave out (default: banking77)"
    )
    staged.add_argument(
        "--data-version",
        type=int,
        choices=[1, 2, 3],
        default=2,
        help="recipe of clef_agents.train.reader_data (default 2)",
    )
    staged.add_argument("--seed", type=int, default=0, help="seed of the draw (default 0)")
    staged.set_defaults(func=_run_reader_records)

    evaluate = subparsers.add_parser(
        "eval", help="accuracy, macro-F1, NLL, Brier, ECE, coverage; JSON + markdown + PNG"
    )
    evaluate.add_argument("--model", default="mini", help="checkpoint folder or 'mini' (default mini)")
    evaluate.add_argument("--datasets", nargs="*", default=None, help="dataset names (default: all with a test split)")
    evaluate.add_argument("--records", nargs="*", default=None, help="JSONL decision records instead of datasets")
    evaluate.add_argument("--split", default="test", help="data set split to evaluate on (default test)")
    evaluate.add_argument(
        "--limit", type=int, default=None, help="at most this many records per dataset (seeded sample)"
    )
    evaluate.add_argument(
        "--report-dir", default="reports/eval", help="where report.json, report.md and plots go (default reports/eval)"
    )
    evaluate.add_argument("--uncalibrated", action="store_true", help="also report metrics before calibration")
    evaluate.set_defaults(func=_run_eval)

    from clef_agents.train import gate_recipe, model_card, reader_choice  # noqa: PLC0415 (release-recipe steps with commands of their own)

    gate_recipe.register(subparsers)
    reader_choice.register(subparsers)
    model_card.register(subparsers)


def _read_jsonl(paths: list[str]) -> list[dict[str, Any]]:
    from clef_agents.records import read_records

    return [record for path in paths for record in read_records(path)]


def _run_train_reader(args: argparse.Namespace) -> int:
    import torch  # noqa: F401 (fails early, before any data is read, where torch is missing)

    from clef_agents.model.reader import ReaderConfig
    from clef_agents.model.threads import command_threads
    from clef_agents.train.reader import attach_reader, train_reader

    command_threads(args.threads)
    summary = train_reader(
        args.out,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        per_set=args.per_set,
        exclude=tuple(args.exclude),
        seed=args.seed,
        time_limit_s=args.time_limit,
        save_every=args.save_every,
        config=ReaderConfig(max_tokens=args.max_tokens),
        init=args.init,
        progress=not args.no_progress,
        command=" ".join(["clef-agents", *sys.argv[1:]]),
        data_version=args.data_version,
        keep_every=args.keep_every,
        device=args.device,
        records=_read_jsonl(args.records) if args.records else None,
        valid_records=_read_jsonl(args.valid_records) if args.valid_records else None,
    )
    print(json.dumps(summary, indent=2))
    if args.model:
        folder = attach_reader(args.model, summary["final"], Path(args.out) / "model")
        print(f"wrote {folder}: {args.model} with the question reader")
    return 0


def _run_reader_records(args: argparse.Namespace) -> int:
    from clef_agents.records import write_records
    from clef_agents.train.reader_data import reader_records

    records = reader_records(
        args.split, per_set=args.per_set, seed=args.seed, exclude=args.exclude, version=args.data_version
    )
    write_records(args.out, records)
    print(
        f"wrote {args.out}: {len(records)} one-question records ({args.split}, {args.per_set} rows a set, recipe {args.data_version})"
    )
    return 0


def _run_train(args: argparse.Namespace) -> int:
    from clef_agents.train.calibration import fit_calibration
    from clef_agents.train.recipes import (
        MINI_CACHE_CAPS,
        MINI_LABEL_WEIGHTS,
        MINI_MIXTURE,
        cap_records,
        mixture_records,
    )
    from clef_agents.train.trainer import TrainSettings, train

    out = Path(args.out)
    weights: dict[str, float] = {}
    label_weights: dict[str, float] = {}
    if args.records:
        train_records = _read_jsonl(args.records)
        valid_records = _read_jsonl(args.valid_records or [])
    else:
        train_records, weights = mixture_records(MINI_MIXTURE, "train", tuple(args.exclude))
        valid_records, _ = mixture_records(MINI_MIXTURE, "valid", tuple(args.exclude))
        label_weights = dict(MINI_LABEL_WEIGHTS)
        if args.stage in ("head", "match"):
            train_records = cap_records(train_records, MINI_CACHE_CAPS, args.seed, keep=label_weights)
    print(
        f"training on {len(train_records)} records ({len(weights) or 'custom'} datasets); {len(valid_records)} held out for calibration"
    )
    from clef_agents.model.threads import command_threads

    command_threads(args.threads)
    model, previous_card = _starting_model(args)
    settings = TrainSettings(
        steps=args.steps,
        batch_size=args.batch_size,
        seed=args.seed,
        threads=args.threads,
        dataset_weights=weights,
        label_weights=label_weights,
        stage=args.stage,
        state_cache=args.state_cache,
    )
    if args.lr_head is not None:
        settings.lr_head = args.lr_head
    summary = train(
        model,
        train_records,
        settings,
        out,
        resume=not args.no_resume,
        progress=not args.no_progress,
        held_out=valid_records if args.stage == "adapter" else (),
    )
    if "probe_held_out" in summary:
        print(
            f"probes on the held-out records: accuracy {summary['probe_held_out']['accuracy']:.4f} "
            f"over {summary['probe_held_out']['answers']} answers"
        )
    if args.stage == "adapter":
        print("the head was not trained and no longer fits the adapter: run the match / head stages with --init next")
    elif valid_records and not args.no_calibrate:
        fit_calibration(model, valid_records, progress=not args.no_progress)
    model.engine.config.trained = True
    card = _data_card(summary, weights, args, len(train_records))
    model.engine.config.data_card = {
        **card,
        "stages": [
            *previous_card.get("stages", [_stage_entry(previous_card)] if previous_card else []),
            _stage_entry(card),
        ],
    }
    final = model.save_pretrained(out / "final")
    (out / "summary.json").write_text(json.dumps({k: v for k, v in summary.items() if k != "losses"}, indent=2))
    print(
        f"saved {final} (loss {summary['first_loss']:.3f} → {summary['final_loss']:.3f}, {summary['wall_time_s'] / 60:.1f} min)"
    )
    return 0


def _starting_model(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """A fresh model, or (``--init``) one that starts from a checkpoint's adapter and head; head
    parts the checkpoint lacks start from their initial values. Returns it and the old data card."""
    from clef_agents.model.checkpoint import resolve_backbone
    from clef_agents.model.config import ClefConfig
    from clef_agents.model.decision_model import checkpoint_folder

    if not args.init:
        return _fresh(_with_lora_args(ClefConfig(name=args.name, backbone=args.backbone), args)), {}
    folder = checkpoint_folder(args.init)
    old = json.loads((folder / "config.json").read_text())
    old["head"]["match"] = True  # the current head; parts the checkpoint lacks start fresh
    config = ClefConfig.model_validate({**old, "name": args.name, "trained": False, "data_card": {}})
    config.backbone = resolve_backbone(config.backbone, folder)
    model = _fresh(_with_lora_args(config, args))
    missing = model.engine.load_weights(folder, strict=False)
    if missing:
        print(f"starting from {folder}; new head parameters start fresh: {', '.join(missing)}")
    return model, old.get("data_card", {})


def lora_layers(values: list[str] | None) -> list[int] | None:
    """``--lora-layers`` → layer indices (None: every layer for 'all', else the config's default).

    Example:
        >>> lora_layers(["3", "4"]), lora_layers(["all"])
        ([3, 4], None)
    """
    if not values or values == ["all"]:
        return None
    try:
        layers = sorted({int(v) for v in values})
    except ValueError:
        raise ValueError(f"--lora-layers takes layer indices or 'all', got {' '.join(values)}") from None
    if layers[0] < 0:
        raise ValueError(f"--lora-layers: layer indices start at 0, got {layers[0]}")
    return layers


def _with_lora_args(config: Any, args: argparse.Namespace) -> Any:
    """The config with ``--lora-layers`` / ``--lora-targets`` applied (unchanged without them)."""
    layers_arg = getattr(args, "lora_layers", None)
    targets = getattr(args, "lora_targets", None)
    if config.lora is None or (layers_arg is None and targets is None):
        return config
    update: dict[str, Any] = {}
    if layers_arg is not None:
        layers = lora_layers(layers_arg)
        update["layers"] = layers if layers is not None else list(range(_backbone_depth(config)))
    if targets is not None:
        update["target_modules"] = list(targets)
    config.lora = config.lora.model_copy(update=update)
    return config


def _backbone_depth(config: Any) -> int:
    """Number of layers of the config's backbone (for ``--lora-layers all``), read from its config.json."""
    from clef_agents.model.backbones import is_minilm, minilm_path

    folder = minilm_path() if is_minilm(config.backbone) else Path(config.backbone)
    if not (folder / "config.json").exists():
        raise ValueError(
            f"--lora-layers all: cannot read the depth of backbone {config.backbone!r}; give the layer indices"
        )
    return int(json.loads((folder / "config.json").read_text())["num_hidden_layers"])


def _stage_entry(card: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "stage",
        "steps",
        "batch_size",
        "train_records",
        "wall_time_s",
        "examples_per_s",
        "loss_first",
        "loss_final",
        "command",
    )
    return {k: card.get(k, "full" if k == "stage" else None) for k in keys}


def _fresh(config: Any) -> Any:
    import warnings

    from clef_agents.model import ClefDecisionModel, UntrainedModelWarning
    from clef_agents.model.engine import DecisionEngine

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedModelWarning)
        return ClefDecisionModel(DecisionEngine.create(config))


def _data_card(
    summary: dict[str, Any], weights: dict[str, float], args: argparse.Namespace, n_records: int
) -> dict[str, Any]:
    return {
        "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "datasets": sorted(weights) if weights else [str(p) for p in args.records],
        "excluded": list(args.exclude),
        "train_records": n_records,
        "steps": summary["steps"],
        "batch_size": args.batch_size,
        "wall_time_s": round(summary["wall_time_s"], 1),
        "examples_per_s": round(summary["examples_per_s"], 2),
        "loss_first": summary["first_loss"],
        "loss_final": summary["final_loss"],
        "stage": args.stage,
        **({"probe_held_out": summary["probe_held_out"]} if "probe_held_out" in summary else {}),
        "command": "clef-agents train "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k in ("out", "steps", "batch_size", "seed", "name", "stage", "init", "lr_head") and v is not None
        )
        + "".join(
            f" --{k.replace('_', '-')} {' '.join(getattr(args, k))}"
            for k in ("lora_layers", "lora_targets")
            if getattr(args, k, None)
        )
        + (" --exclude " + " ".join(args.exclude) if args.exclude else ""),
    }


def _run_calibrate(args: argparse.Namespace) -> int:
    if getattr(args, "max_auto_error", None) is not None:
        from clef_agents.thresholds.cli import run_lane_fit

        return run_lane_fit(args)
    if not args.model or not args.out:
        raise ValueError(
            "probability calibration needs --model and --out (or pass --max-auto-error to fit lane thresholds)"
        )
    from clef_agents.model import ClefDecisionModel
    from clef_agents.train.calibration import fit_calibration, fit_reader_temperature
    from clef_agents.train.evaluate import summarise_calibration

    model = ClefDecisionModel.from_pretrained(args.model)
    records = _read_jsonl(args.records)
    before = summarise_calibration(model, records)
    calibration = fit_calibration(model, records)
    reader = fit_reader_temperature(model, records)
    after = summarise_calibration(model, records)
    folder = model.save_pretrained(args.out)
    print(
        json.dumps(
            {
                "calibration": calibration.model_dump(),
                "reader_final_temperature": reader,
                "before": before,
                "after": after,
                "saved": str(folder),
            },
            indent=2,
        )
    )
    return 0


def _run_teach(args: argparse.Namespace) -> int:
    from clef_agents.model import ClefDecisionModel
    from clef_agents.train.teach import FEATURE_CANDIDATES, teach

    if not args.records and not args.datasets:
        raise ValueError("teach needs labelled records: pass --records FILE... or --datasets NAME...")
    if args.datasets and args.records and not args.valid_records:
        raise ValueError(
            "mixing --records with --datasets needs --valid-records (the data sets bring their own held-out split)"
        )
    from clef_agents.train.split import check_trainable

    check_trainable(args.datasets or [])
    from clef_agents.model.threads import command_threads

    command_threads(args.threads)
    records, held_out = _read_jsonl(args.records or []), _read_jsonl(args.valid_records or [])
    for name in args.datasets or []:
        from clef_agents.train.datasets import available_splits, load_records

        records += load_records(name, "train")
        held_out += load_records(name, "valid") if "valid" in available_splits(name) else []
    priors = _parse_priors(args.prior)
    model = ClefDecisionModel.from_pretrained(args.model)
    began = time.time()
    reports = teach(
        model,
        records,
        held_out,
        min_records=args.min_records,
        priors=priors,
        seed=args.seed,
        features=args.features or FEATURE_CANDIDATES,
        lexical=not args.no_lexical,
        neighbours=not args.no_neighbours,
        catch_all=args.catch_all,
        tool_match=not args.no_tool_match,
        refit=not args.no_refit,
        progress=not args.no_progress,
        identifier_words=args.identifier_words,
    )
    seconds = round(time.time() - began, 1)
    earlier = model.engine.config.data_card.get("taught") or {}
    model.engine.config.data_card["taught"] = {
        # questions taught before and not taught again keep their reports; a re-taught one is replaced
        "questions": {**earlier.get("questions", {}), **reports},
        "earlier": [
            *earlier.get("earlier", []),
            *(
                [{k: earlier[k] for k in ("command", "seconds", "datasets") if k in earlier}]
                if earlier.get("command")
                else []
            ),
        ],
        "datasets": list(args.datasets or []),
        "records": [str(p) for p in args.records or []],
        "seconds": seconds,
        "command": f"clef-agents teach --model {args.model} --out {args.out}"
        + (" --datasets " + " ".join(args.datasets) if args.datasets else "")
        + (" --records " + " ".join(args.records) if args.records else "")
        + (" --valid-records " + " ".join(args.valid_records) if args.valid_records else "")
        + (" --prior " + " ".join(args.prior) if args.prior else "")
        + (" --features " + " ".join(args.features) if args.features else "")
        + (" --no-lexical" if args.no_lexical else "")
        + (" --identifier-words" if args.identifier_words else "")
        + (" --no-neighbours" if args.no_neighbours else "")
        + (" --catch-all " + " ".join(args.catch_all) if args.catch_all else "")
        + (" --no-tool-match" if args.no_tool_match else "")
        + (" --no-refit" if args.no_refit else ""),
    }
    folder = model.save_pretrained(args.out)
    (folder / "teach_report.json").write_text(json.dumps(reports, indent=2) + "\n")
    print(teach_table(reports))
    print(f"taught {sum('skipped' not in r for r in reports.values())} question(s) in {seconds:.0f} s; saved {folder}")
    return 0


def _run_taught(args: argparse.Namespace) -> int:
    """Print what the checkpoint ``--model`` names was taught (torch is not imported)."""
    from clef_agents.loading import checkpoint_folder, spec_kind  # noqa: PLC0415
    from clef_agents.taught_index import read_taught, taught_table  # noqa: PLC0415

    if spec_kind(args.model) != "checkpoint":
        raise ValueError(
            f"--model: got {args.model!r}, a {spec_kind(args.model)} model; allowed: a checkpoint folder "
            "or 'mini' (what a checkpoint was taught is stored in its taught.json)"
        )
    folder = checkpoint_folder(args.model)
    questions = read_taught(folder)
    if args.json:
        print(json.dumps([q.as_dict() for q in questions], indent=2, ensure_ascii=False))
    elif not questions:
        print(f"{args.model}: nothing taught ({folder} has no taught questions; teach some with clef-agents teach)")
    else:
        print(taught_table(questions))
        print(
            f"\n{args.model}: {len(questions)} taught question(s); ask one in the same wording (case and spacing aside), "
            "or, for a choice, reworded with the same options (recognised above a similarity tolerance), "
            "to use its taught weights"
        )
    return 0


def _parse_priors(items: list[str]) -> dict[str, float]:
    priors = {}
    for item in items:
        label, sep, share = item.rpartition("=")
        try:
            priors[label] = float(share)
        except ValueError:
            sep = ""
        if not sep or not label:
            raise ValueError(f"--prior takes LABEL=SHARE (e.g. oos=0.2), got {item!r}")
    return priors


FEW_HELD_OUT = 50
"""Under this many held-out records, ``teach`` says that its blend and figures rest on too few."""


def held_out_interval(accuracy: float, n: int) -> tuple[float, float]:
    """The two-sided 95 % Clopper–Pearson interval of an accuracy measured on ``n`` held-out records.

    Example:
        >>> [round(x, 2) for x in held_out_interval(0.8, 10)]
        [0.44, 0.97]
    """
    from clef_agents.thresholds.stats import (
        clopper_pearson_lower,
        clopper_pearson_upper,
    )

    right = round(accuracy * n)
    return clopper_pearson_lower(right, n, 0.975), clopper_pearson_upper(right, n, 0.975)


def teach_table(reports: dict[str, dict[str, Any]]) -> str:
    """What ``clef-agents teach`` prints: per question, the parts kept and the held-out figures, with the 95 % interval
    of the taught accuracy, and a warning under the table when a question was held out on fewer than ``FEW_HELD_OUT``.

    Example:
        >>> report = {"records": 100, "held_out": 10, "features": "mean4+max", "held_out_head": {"accuracy": 0.5, "nll": 0.7},
        ...           "held_out_taught": {"accuracy": 0.8, "nll": 0.4}}
        >>> print(teach_table({"Is this spam?": report}).splitlines()[2])
        | Is this spam? | 100 | 10 | mean4+max | no | no | no | no | 0.500 | 0.800 (0.44–0.97) | 0.700 → 0.400 |
    """
    lines = [
        (
            "| question | records | held out | features | words | neighbours | novelty | tools | held-out acc (head) | "
            "held-out acc (taught, 95 % interval) | NLL head → taught |"
        ),
        "|---|---:|---:|---|---|---|---|---|---:|---:|---|",
    ]
    few = []
    for text, r in reports.items():
        if "skipped" in r:
            lines.append(f"| {text[:60]} | {r['records']} | | | | | | | skipped: {r['skipped']} | | |")
            continue
        head, taught = r["held_out_head"], r["held_out_taught"]
        parts = " | ".join(kept_parts(r).values())
        held = r.get("held_out", 0)
        low, high = held_out_interval(taught["accuracy"], held) if held else (0.0, 1.0)
        lines.append(
            f"| {text[:60]} | {r['records']} | {held} | {r['features']} | {parts} | {head['accuracy']:.3f} | "
            f"{taught['accuracy']:.3f} ({low:.2f}–{high:.2f}) | {head['nll']:.3f} → {taught['nll']:.3f} |"
        )
        if held < FEW_HELD_OUT:
            few.append(f"{text[:60]!r} ({held})")
    if few:
        lines += [
            "",
            (
                f"Few held-out records: {', '.join(few)}. The blend was chosen on them and these figures are rough; on a few "
                "dozen records a taught question can answer more surely than it is right (bench/teaching/curve.md). "
                "Label more, or hold out more with --valid-records, before you trust its lanes."
            ),
        ]
    return "\n".join(lines)


def _run_eval(args: argparse.Namespace) -> int:
    from clef_agents.train.evaluate import run_evaluation

    report = run_evaluation(
        model_ref=args.model,
        datasets=args.datasets,
        record_files=args.records,
        split=args.split,
        limit=args.limit,
        report_dir=Path(args.report_dir),
        with_uncalibrated=args.uncalibrated,
    )
    print((Path(args.report_dir) / "report.md").read_text())
    return 0 if report else 1
