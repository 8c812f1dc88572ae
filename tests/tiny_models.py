"""Tiny random backbones (a BERT encoder and a Qwen3 decoder) and a tokenizer built in memory."""

from __future__ import annotations

import warnings

WORDS = (
    "the a is my card lost stolen refund money charged twice production down urgent help please billing "
    "bug crash sales price order delivery late spam win prize free click link hello thanks angry very "
    "not good bad service account password reset login error payment failed yes no which team what how"
).split()


def build_tokenizer(with_cls_sep: bool):
    """A word-level fast tokenizer over a small vocabulary, built in memory."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    vocab = {token: i for i, token in enumerate(specials + WORDS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    if with_cls_sep:
        core.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        model_max_length=64,
    )


def tiny_backbone(kind: str, folder):
    """Save a tiny random encoder (BERT) or decoder (Qwen3) + tokenizer to ``folder``; return the folder."""
    import torch
    from transformers import AutoModel, BertConfig, Qwen3Config

    torch.manual_seed(0)
    tokenizer = build_tokenizer(with_cls_sep=(kind == "encoder"))
    vocab = len(tokenizer)
    if kind == "encoder":
        config = BertConfig(
            vocab_size=vocab,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
        )
    else:
        config = Qwen3Config(
            vocab_size=vocab,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            intermediate_size=64,
            max_position_embeddings=64,
            pad_token_id=0,
        )
    model = AutoModel.from_config(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def make_model(folder, **kwargs):
    """An untrained ClefDecisionModel on a tiny backbone, with its LoRA and field gate made non-trivial."""
    import torch

    from clef_agents.model import ClefDecisionModel, HeadSettings, LoraSettings, UntrainedModelWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedModelWarning)
        model = ClefDecisionModel.from_backbone(
            str(folder),
            lora=LoraSettings(r=4, alpha=8, dropout=0.0, layers=[1]),
            head=HeadSettings(dim=32, heads=2, ffn=64, dropout=0.0),
            **kwargs,
        )
    torch.manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.engine.network.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.2)
        model.engine.head.field_gate.fill_(1.0)
        model.engine.head.match_option[-1].weight.normal_(0, 0.2)
    return model


def tiny_causal_lm(folder):
    """Save a tiny random Qwen3 causal LM whose vocabulary has the answer tokens (yes/no, A–Z); return the folder."""
    import string

    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config

    torch.manual_seed(0)
    words = [
        "[PAD]",
        "[UNK]",
        *WORDS,
        "Yes",
        "No",
        "Question",
        "about",
        "text",
        "above",
        "Answer",
        "or",
        "Options",
        "Levels",
        "lowest",
        "first",
        "with",
        "letter",
        "of",
        "best",
        "option",
        "level",
        "that",
        "fits",
        "?",
        ":",
        ".",
        ",",
        *string.ascii_uppercase,
    ]
    vocab = {token: i for i, token in enumerate(dict.fromkeys(words))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", model_max_length=512
    )
    config = Qwen3Config(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        intermediate_size=64,
        max_position_embeddings=512,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
