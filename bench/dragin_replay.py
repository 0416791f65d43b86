"""The engine's decisions replayed without a KV cache across calls and without batching: the oracle of the tests
and the benchmark's second baseline (kept out of the package). It is not what the authors' code computes
(``bench/dragin_authors_pattern.py`` is): its attention passes cover the whole prompt, demos included.

One question at a time: ``model.generate`` for a round, then a second full forward pass over prompt + generated
text with eager attention to get RIND's attention rows, and (when retrieval fires) another full pass for QFS.
The decisions use exactly the engine's functions (``check_trigger``, ``form_query``, the progress guarantee, the
paper prompt's stop, either DRAGIN profile) evaluated at the same points (each sentence end, with the rows
available at that point), so greedy outputs can be compared one to one.

With ``profile`` set (an :class:`adaptive_rag.lm.profiling.Profile`), it times the same sections as the engine's
profile: prefill and decode steps of ``generate`` (split at the first logits processor call), the extra attention
passes, retrieval, prompt building and the per-token decision loop ("signals").
"""

from __future__ import annotations

import copy
import time
from contextlib import nullcontext

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from adaptive_rag.lm.decoder import stop_token_ids
from adaptive_rag.lm.profiling import Profile
from adaptive_rag.lm.tokenization import continuation_ids, prompt_ids
from adaptive_rag.plumbing.records import QAExample
from adaptive_rag.plumbing.retriever import Retriever
from inference.dynamic_rag.engine import ANSWER_MARKER, qfs_eligible
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder
from inference.dynamic_rag.queries import form_query
from inference.dynamic_rag.round_view import RoundView
from inference.dynamic_rag.text_units import TokenText, ends_sentence
from inference.dynamic_rag.triggers import check_trigger


class DraginReplay:
    def __init__(self, model, tokenizer, retriever: Retriever, prompts: PromptBuilder, method: MethodConfig,
                 max_new_tokens: int, head_reduce: str = "mean"):
        self.model, self.tokenizer, self.retriever = model, tokenizer, retriever
        self.prompts, self.max_new_tokens, self.head_reduce = prompts, max_new_tokens, head_reduce
        self.method = method.resolved(prompts.cfg.demos)
        self.per_head = "attention_per_head" in self.method.needs(head_reduce)
        # The reference asks a plain model for attentions: an eager copy (the engine's model keeps SDPA).
        self.eager = type(model)(copy.deepcopy(model.config)).eval()
        self.eager.load_state_dict(model.state_dict())
        self.eager.set_attn_implementation("eager")
        self.generator = model  # the model ``generate`` runs on
        self.text = TokenText(tokenizer)
        self.stop_ids = stop_token_ids(tokenizer) | {tokenizer.eos_token_id}
        self.forward_passes = 0
        self.profile: Profile | None = None

    def _timed(self, name: str):
        return self.profile.section(name) if self.profile is not None else nullcontext()

    @torch.no_grad()
    def _attention_rows(self, ids: list[int], prompt_len: int) -> tuple[list[torch.Tensor], torch.Tensor]:
        """A second, full forward pass: last-layer attention rows of the generated tokens and of the last prompt
        position, per head or heads reduced as the engine keeps them."""
        with self._timed("attention_pass"):
            out = self.eager(input_ids=torch.tensor([ids]), output_attentions=True)
        self.forward_passes += 1
        if self.profile is not None:
            self.profile.count("attention_pass_tokens", len(ids))
            self.profile.work("attention_pass", len(ids), len(ids), _causal_pairs(len(ids)))
        att = out.attentions[-1][0].float()  # (H, T, T)
        if not self.per_head:
            att = att.mean(dim=0) if self.head_reduce == "mean" else att.amax(dim=0)
        rows = [att[..., prompt_len + j, : prompt_len + j + 1] for j in range(len(ids) - prompt_len)]
        return rows, att[..., prompt_len - 1, :prompt_len]

    @torch.no_grad()
    def _generate(self, prompt: list[int], budget: int):
        first_step = _FirstCall() if self.profile is not None else None
        start = time.perf_counter()
        mask = torch.ones(1, len(prompt), dtype=torch.long)
        out = self.generator.generate(torch.tensor([prompt]), attention_mask=mask,
                                      max_new_tokens=budget, do_sample=False, output_scores=True,
                                      return_dict_in_generate=True, pad_token_id=self.tokenizer.pad_token_id,
                                      eos_token_id=sorted(self.stop_ids),
                                      logits_processor=LogitsProcessorList([first_step] if first_step else []),
                                      stopping_criteria=StoppingCriteriaList([_PromptStop(self.text, self.prompts,
                                                                                          len(prompt))]))
        if first_step is not None:  # the first logits came out of the prefill; the rest of generate is decode steps
            end = time.perf_counter()
            self.profile.add("prefill", first_step.at - start)
            self.profile.add("decode", end - first_step.at)
            self.profile.count("prefill_tokens", len(prompt))
            self.profile.work("prefill", len(prompt), 1, _causal_pairs(len(prompt)))
            for k in range(1, len(out.scores)):  # step k feeds one token against len(prompt) + k keys
                self.profile.work("decode", 1, 1, len(prompt) + k)
        self.forward_passes += len(out.scores)
        gen, probs, entropies = [], [], []
        for tok, logits in zip(out.sequences[0, len(prompt):].tolist(), out.scores):
            if tok in self.stop_ids:
                return gen, probs, entropies
            logp = torch.log_softmax(logits[0].float(), dim=-1)
            gen.append(tok)
            probs.append(float(logp[tok].exp()))
            entropies.append(float(-(logp.exp() * logp).sum()))
        return gen, probs, entropies

    def _search(self, query: str, retrievals: list[dict]) -> list:
        with self._timed("retrieval"):
            docs = [h.passage for h in self.retriever.search([query], self.method.top_k)[0]]
        retrievals.append({"query": query, "doc_ids": [d.id for d in docs]})
        return docs

    def _rind_view(self, example: QAExample, ids: list[int], eligible: list[bool], gen: list[int],
                   after_retrieval: bool, docs_round: bool) -> tuple[RoundView, list[torch.Tensor]]:
        """The round's view (rows still empty) and every generated token's row: from a full pass over the prompt and
        the round's text, as the engine sees them while decoding (``docs_round``: the round is kept unchecked)."""
        rows, prompt_row = self._attention_rows(ids + gen, len(ids)) if gen else ([], None)
        view = RoundView(example.question, [], [], [], [], self.text.pieces(ids), eligible,
                         after_retrieval=after_retrieval, prompt_row=prompt_row, head_reduce=self.head_reduce)
        return view, rows

    def _qfs_view(self, view: RoundView, example: QAExample, prior: str, ids: list[int], gen: list[int],
                  event) -> RoundView:
        """The view QFS reads (``prior``: the answer before this round): one more full pass, as the reference runs
        one more pass for the query's attention rows."""
        view.rows, view.prompt_row = self._attention_rows(ids + gen, len(ids))
        return view

    def run_one(self, example: QAExample) -> dict:
        m = self.method
        prior, docs, retrievals, after_retrieval = "", [], [], False
        cap = m.retrieval_cap(self.max_new_tokens)
        if m.retrieves_first and cap > 0:
            docs = self._search(example.question, retrievals)
        while True:
            with self._timed("prompts"):
                prompt = self.prompts.build(example.question, docs, prior)
                ids, offsets = prompt_ids(self.tokenizer, prompt.text, offsets=True)
                eligible = qfs_eligible(offsets, prompt.question_span, prompt.prior_start)
                budget = max(1, self.max_new_tokens - len(continuation_ids(self.tokenizer, prior)))
            gen, probs, entropies = self._generate(ids, budget)
            round_prior = prior
            with self._timed("signals"):  # the per-token decisions (and the attention pass they need)
                pieces = self.text.pieces(gen)
                stop = self.prompts.stop_index("".join(pieces))
                if stop is not None:  # the engine's rule: a new "Question:" ends the answer
                    pos, keep_n = 0, len(gen)
                    for i, piece in enumerate(pieces):
                        pos += len(piece)
                        if pos > stop:
                            keep_n = i
                            break
                    gen, pieces, probs, entropies = gen[:keep_n], pieces[:keep_n], probs[:keep_n], entropies[:keep_n]
                docs_round = after_retrieval and bool(docs) and m.docs_for_next_sentence_only
                view, rows = self._rind_view(example, ids, eligible, gen, after_retrieval, docs_round)
                after_retrieval = False
                event, keep, final = None, len(gen), True
                for n in range(1, len(gen) + 1):
                    view.pieces, view.probs, view.entropies, view.rows = pieces[:n], probs[:n], entropies[:n], rows[:n]
                    nxt = pieces[n] if n < len(gen) else ""
                    sentence_end = ends_sentence(view.text, nxt)
                    final = n == len(gen) or (sentence_end and bool(ANSWER_MARKER.search(prior + view.text)))
                    if docs_round and (sentence_end or final):
                        keep = n
                        break
                    if len(retrievals) < cap:
                        event = check_trigger(view, m, sentence_end=sentence_end, final=final)
                    if event is not None or final:
                        keep = event.keep if event is not None else n
                        break
                    if sentence_end:
                        view.checked = n
            prior += self.tokenizer.decode(gen[:keep], skip_special_tokens=True)
            if docs_round and not final:  # the documents served their sentence: go on without them
                docs = []
                continue
            if event is None:
                return {"id": example.id, "output": prior.strip(), "retrievals": retrievals}
            with self._timed("signals"):
                if m.query == "qfs":
                    view = self._qfs_view(view, example, round_prior, ids, gen, event)
                query = form_query(view, event, m, self.tokenizer)
            docs = self._search(query, retrievals)
            after_retrieval = True

    def run(self, examples: list[QAExample]) -> tuple[list[dict], float]:
        start = time.perf_counter()
        return [self.run_one(ex) for ex in examples], time.perf_counter() - start


def _causal_pairs(tokens: int) -> int:
    return tokens * (tokens + 1) // 2


class _PromptStop(StoppingCriteria):
    """Ends ``generate`` where the engine ends a round: once the text holds the prompt style's stop
    (:meth:`PromptBuilder.stop_index`: the paper style's new "Question:" line; other styles have none). The tokens
    after it would be cut anyway; generating them was work the engine and the authors' code (with the same stop
    rule) do not do."""

    def __init__(self, text: TokenText, prompts: PromptBuilder, prompt_len: int):
        self.text, self.prompts, self.prompt_len = text, prompts, prompt_len

    def __call__(self, input_ids, scores, **kwargs):
        done = [self.prompts.stop_index("".join(self.text.pieces(row[self.prompt_len:].tolist()))) is not None
                for row in input_ids]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class _FirstCall(LogitsProcessor):
    """Notes when ``generate`` first hands it logits: the end of the prefill."""

    def __init__(self):
        self.at: float | None = None

    def __call__(self, input_ids, scores):
        if self.at is None:
            self.at = time.perf_counter()
        return scores
