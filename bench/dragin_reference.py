"""DRAGIN run the way the reference implementation runs it: the benchmark's baseline (kept out of the package).

One question at a time: ``model.generate`` for a round, then a second full forward pass over prompt + generated
text with eager attention to get RIND's attention rows, and (when retrieval fires) another full pass for QFS.
The decisions use exactly the engine's functions (``check_trigger``, ``form_query``) evaluated at the same
points (each sentence end, with the rows available at that point), so greedy outputs can be compared one to one.
"""

from __future__ import annotations

import copy
import time

import torch

from data_builders.schema import QAExample
from inference.engine import ANSWER_MARKER, stop_token_ids
from inference.methods import MethodConfig, RoundView, check_trigger, form_query
from inference.prompts import PromptBuilder
from inference.text_units import TokenText, ends_sentence
from retrieval_adapt.base import Retriever


class ReferenceDragin:
    def __init__(self, model, tokenizer, retriever: Retriever, prompts: PromptBuilder, method: MethodConfig,
                 max_new_tokens: int):
        self.model, self.tokenizer, self.retriever = model, tokenizer, retriever
        self.prompts, self.method, self.max_new_tokens = prompts, method, max_new_tokens
        # The reference asks a plain model for attentions: an eager copy (the engine's model keeps SDPA).
        self.eager = type(model)(copy.deepcopy(model.config)).eval()
        self.eager.load_state_dict(model.state_dict())
        self.eager.set_attn_implementation("eager")
        self.text = TokenText(tokenizer)
        self.stop_ids = stop_token_ids(tokenizer) | {tokenizer.eos_token_id}
        self.forward_passes = 0

    @torch.no_grad()
    def _attention_rows(self, ids: list[int], prompt_len: int) -> list[torch.Tensor]:
        """A second, full forward pass: last-layer attention rows of the generated tokens, heads averaged."""
        out = self.eager(input_ids=torch.tensor([ids]), output_attentions=True)
        self.forward_passes += 1
        att = out.attentions[-1][0].float().mean(dim=0)  # (T, T)
        return [att[prompt_len + j, : prompt_len + j + 1] for j in range(len(ids) - prompt_len)]

    @torch.no_grad()
    def _generate(self, prompt_ids: list[int], budget: int):
        out = self.model.generate(torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids),
                                  dtype=torch.long), max_new_tokens=budget, do_sample=False, output_scores=True,
                                  return_dict_in_generate=True, pad_token_id=self.tokenizer.pad_token_id,
                                  eos_token_id=sorted(self.stop_ids))
        self.forward_passes += len(out.scores)
        gen, probs, entropies = [], [], []
        for tok, logits in zip(out.sequences[0, len(prompt_ids):].tolist(), out.scores):
            if tok in self.stop_ids:
                return gen, probs, entropies, True
            logp = torch.log_softmax(logits[0].float(), dim=-1)
            gen.append(tok)
            probs.append(float(logp[tok].exp()))
            entropies.append(float(-(logp.exp() * logp).sum()))
        return gen, probs, entropies, False

    def run_one(self, example: QAExample) -> dict:
        prior, docs, retrievals, rounds = "", [], [], 0
        while True:
            prompt = self.prompts.build(example.question, docs, prior)
            enc = self.tokenizer(prompt.text, add_special_tokens=False, return_offsets_mapping=True)
            ids, offsets = enc["input_ids"], enc["offset_mapping"]
            q0, q1 = prompt.question_span
            eligible = [(q0 <= a and b <= q1) or a >= prompt.prior_start for a, b in offsets]
            budget = max(1, self.max_new_tokens - len(self.tokenizer.encode(prior, add_special_tokens=False)))
            gen, probs, entropies, _ = self._generate(ids, budget)
            rounds += 1
            rows = self._attention_rows(ids + gen, len(ids)) if gen else []
            pieces = self.text.pieces(gen)
            view = RoundView(example.question, [], [], [], [], self.text.pieces(ids), eligible)
            event, keep = None, len(gen)
            for n in range(1, len(gen) + 1):
                view.pieces, view.probs, view.entropies, view.rows = pieces[:n], probs[:n], entropies[:n], rows[:n]
                nxt = pieces[n] if n < len(gen) else ""
                sentence_end = ends_sentence(view.text, nxt)
                final = n == len(gen) or (sentence_end and bool(ANSWER_MARKER.search(prior + view.text)))
                if len(retrievals) < self.method.max_rounds and rounds <= self.method.max_rounds:
                    event = check_trigger(view, self.method, sentence_end=sentence_end, final=final)
                if event is not None or final:
                    keep = event.keep if event is not None else n
                    break
                if sentence_end:
                    view.checked = n
            prior += self.tokenizer.decode(gen[:keep], skip_special_tokens=True)
            if event is None:
                return {"id": example.id, "output": prior.strip(), "retrievals": retrievals}
            if self.method.query == "qfs":  # the reference runs one more pass for the query's attention row
                view.rows = self._attention_rows(ids + gen[: event.token + 1], len(ids))
            query = form_query(view, event, self.method)
            docs = [h.passage for h in self.retriever.search([query], self.method.top_k)[0]]
            retrievals.append({"query": query, "doc_ids": [d.id for d in docs]})

    def run(self, examples: list[QAExample]) -> tuple[list[dict], float]:
        start = time.perf_counter()
        return [self.run_one(ex) for ex in examples], time.perf_counter() - start
