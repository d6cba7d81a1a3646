"""Tiny M2M-100-style and NLLB-200-style transformers folders built offline with transformers'
own classes (tests/export/test_importing.py, tests/cli/test_import_model.py): a sentencepiece
model trained on DebMT-10 lines; an ``M2M100Tokenizer``'s vocabulary (fairseq's four symbols
first) with WMT-21's eight language codes and M2M-100's eight made-up words after them, or an
``NllbTokenizer`` (fairseq's offset of one, three NLLB codes, ``<mask>`` and two padding rows
after them, as NLLB-200's 256,206 rows); a random 2-layer ``M2M100ForConditionalGeneration``
(d_model 32) saved as safetensors. Its output projection (untied) and decoder's final norm make
the end of sentence likely enough that translations end by themselves, at different lengths."""

import json
import os

from conftest import ROOT

RAW = os.path.join(ROOT, "data", "debmt10")
LANG_CODES = "wmt21"  # en, ha, is, ja, cs, ru, zh, de
MADEUP = 8  # M2M-100's made-up words after the language tokens
NLLB_CODES = {"en": "eng_Latn", "de": "deu_Latn", "cs": "ces_Latn"}


def _spm(out, **options):
    import sentencepiece

    lines = []
    for name in ("train.en-de.en", "train.en-de.de", "train.en-cs.cs"):
        with open(os.path.join(RAW, name), encoding="utf-8") as f:
            lines += [next(f) for _ in range(300)]
    prefix = os.path.join(out, "sentencepiece.bpe")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=prefix,
        vocab_size=160,
        character_coverage=1.0,
        minloglevel=2,
        **options,
    )
    os.remove(prefix + ".vocab")
    return sentencepiece.SentencePieceProcessor(model_file=prefix + ".model")


def _model(out, rows, seed, eos):
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    torch.manual_seed(seed)
    config = M2M100Config(
        vocab_size=rows,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        init_std=0.3,
        tie_word_embeddings=False,
    )
    model = M2M100ForConditionalGeneration(config)
    with torch.no_grad():  # one embedding table; the end of sentence: a constant on hidden unit 0, read by its row
        for embedding in (model.model.encoder.embed_tokens, model.model.decoder.embed_tokens, model.lm_head):
            embedding.weight.copy_(model.model.shared.weight)
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[2, 0] = 1.0
        model.model.decoder.layer_norm.bias[0] = eos
    model.save_pretrained(out, safe_serialization=True)
    return out


def build_nllb_folder(out, seed=0, eos=4.5):
    """An NllbTokenizer over a BPE sentencepiece model (``<unk> <s> </s>`` its first pieces, as
    NLLB's), its language codes and ``<mask>`` given NLLB's ids (after the pieces, in order)."""
    from transformers import NllbTokenizer

    os.makedirs(out, exist_ok=True)
    sp = _spm(out, model_type="bpe", unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    vocab = {s: i for i, s in enumerate(["<s>", "<pad>", "</s>", "<unk>"])}
    for i in range(3, sp.get_piece_size()):
        vocab[sp.id_to_piece(i)] = i + 1
    codes = list(NLLB_CODES.values())
    for token in codes + ["<mask>"]:
        vocab[token] = len(vocab)
    tok = NllbTokenizer(**NllbTokenizer.convert_to_native_format(vocab=vocab, extra_special_tokens=codes))
    tok.save_pretrained(out)
    return _model(out, len(vocab) + 2, seed, eos)


def nllb_tokenizer_of(folder):
    from transformers import NllbTokenizer

    return NllbTokenizer.from_pretrained(folder)


def build_m2m_folder(out, seed=0, eos=4.5):
    os.makedirs(out, exist_ok=True)
    sp = _spm(out, model_type="unigram")
    vocab = {s: i for i, s in enumerate(["<s>", "<pad>", "</s>", "<unk>"])}
    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i)):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    settings = {"tokenizer_class": "M2M100Tokenizer", "language_codes": LANG_CODES, "num_madeup_words": MADEUP}
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(settings, f)
    return _model(out, len(vocab) + 8 + MADEUP, seed, eos)


def tokenizer_of(folder):
    from transformers import M2M100Tokenizer

    return M2M100Tokenizer(
        os.path.join(folder, "vocab.json"),
        os.path.join(folder, "sentencepiece.bpe.model"),
        language_codes=LANG_CODES,
        num_madeup_words=MADEUP,
    )


def rows(n=8, codes=None):
    """(src, tgt, text): DebMT-10 test lines of at most 100 characters, three directions (the
    languages as ``codes`` names them: NLLB_CODES)."""
    found = []
    for src, tgt, name in (("en", "de", "test.en-de.en"), ("de", "en", "test.en-de.de"), ("cs", "en", "test.en-cs.cs")):
        with open(os.path.join(RAW, name), encoding="utf-8") as f:
            found += [(src, tgt, line.strip()) for line in f if 0 < len(line.strip()) <= 100][:n]
    if codes:
        found = [(codes[src], codes[tgt], text) for src, tgt, text in found]
    return found


def fairseq_beam_choice(model, batch, forced_bos: int, max_len: int):
    """fairseq's beam-5 choice among transformers ``generate``'s five finished hypotheses: the
    ids (end of sentence included) of the best by fairseq's score, the mean log-probability of
    its tokens (which counts the forced target-language token; ``generate``'s scores do not),
    the earlier of two equal ones."""
    import torch

    out = model.generate(
        **batch,
        forced_bos_token_id=forced_bos,
        num_beams=5,
        num_return_sequences=5,
        early_stopping=True,
        max_new_tokens=max_len + 1,
        min_new_tokens=1,
        suppress_tokens=[1],
    )
    hypotheses = [[i for i in seq[1:].tolist() if i != 1] for seq in out]
    assert all(h[-1] == 2 for h in hypotheses)  # all ended by themselves
    scores = []
    with torch.no_grad():
        for h in hypotheses:
            logits = model(**batch, decoder_input_ids=torch.tensor([[2] + h[:-1]])).logits[0]
            scores.append(float(torch.log_softmax(logits, -1).gather(-1, torch.tensor(h)[:, None]).mean()))
    return hypotheses[max(range(5), key=lambda b: (scores[b], -b))]


def fairseq_search_on_transformers(
    model, batch, forced_bos: int, max_len: int, beam: int = 5, pad: int = 1, eos: int = 2
):
    """fairseq 0.12's beam search (``SequenceGenerator``, length penalty 1) written out over
    transformers' own model, each step's log-probabilities from the folder's forward pass: the
    target-language token forced first with its log-probability counted; at each step the best
    ``2 * beam`` continuations, those ending the sentence among the first ``beam`` finished (at
    most ``beam`` in all, in candidate order), the first ``beam`` others kept; the end of sentence
    forced at ``max_len``; stop once ``beam`` are finished; the best by the mean log-probability
    of its tokens (end of sentence included), the earlier of two equal. The ids of the best,
    end of sentence included."""
    import torch

    live, scores, finished = [[eos]], torch.zeros(1), []
    with torch.no_grad():
        encoder = model.get_encoder()(**batch)
        for step in range(max_len + 1):
            ids = torch.tensor(live)
            logits = model(
                encoder_outputs=(encoder.last_hidden_state.expand(len(live), -1, -1),),
                attention_mask=batch["attention_mask"].expand(len(live), -1),
                decoder_input_ids=ids,
            ).logits[:, -1]
            lprobs = torch.log_softmax(logits.double(), -1)
            lprobs[:, pad] = -torch.inf
            keep = forced_bos if step == 0 else eos if step == max_len else None
            if keep is not None:
                lprobs[:, :keep], lprobs[:, keep + 1 :] = -torch.inf, -torch.inf
            total = (lprobs + scores[:, None]).view(-1)
            top = torch.topk(total, min(2 * beam, int(torch.isfinite(total).sum())))
            candidates = [(float(s), int(i) // lprobs.shape[1], int(i) % lprobs.shape[1]) for s, i in zip(*top)]
            for score, origin, token in candidates[:beam]:
                if token == eos and len(finished) < beam:
                    finished.append((score / (step + 1), live[origin][1:] + [eos]))
            if len(finished) >= beam or step == max_len:
                break
            kept = [c for c in candidates if c[2] != eos][:beam]
            live = [live[origin] + [token] for _, origin, token in kept]
            scores = torch.tensor([score for score, _, _ in kept], dtype=torch.double)
    return max(enumerate(finished), key=lambda f: (f[1][0], -f[0]))[1][1]


def shard_weights(folder, drop=False):
    """model.safetensors as two shards and their index (the second shard removed with ``drop``)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(os.path.join(folder, "model.safetensors"))
    os.remove(os.path.join(folder, "model.safetensors"))
    names, weight_map = sorted(tensors), {}
    for k, part in enumerate((names[::2], names[1::2])):
        shard = f"model-0000{k + 1}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, os.path.join(folder, shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    if drop:
        os.remove(os.path.join(folder, "model-00002-of-00002.safetensors"))
