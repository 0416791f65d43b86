"""The rollouts trl's ``GRPOTrainer(rollout_func=...)`` calls: ``rollout(prompts, trainer) -> dict``.

trl hands the rollout the prompts of this process, each already repeated ``num_generations`` times in a row (its
``RepeatSampler``), and expects one completion per prompt: ``prompt_ids``, ``completion_ids``, ``logprobs`` (the
sampling log-probability of each completion id) and, optionally, ``env_mask`` (1 where the policy wrote the id: the
loss is taken there only). Every other key reaches the reward functions by name (``training/grpo_rewards.py``).
The dataset's ``prompt`` column is the question itself; the rollout builds the model's prompt.

* :class:`GateRollout` (ADAPT-LLM's single decision): the policy continues ADAPT-LLM's parametric prompt with an
  answer or ``<RET>``; ``<RET>`` retrieves ``top_k`` passages with the question, the context prompt is answered
  greedily by the same model (the environment's step: not trained, not in the completion). Exploration
  (``explore_ret``): in each group the first ``round(G · explore_ret)`` completions are set to ``<RET>`` + EOS
  rather than sampled (their sampling log-probabilities are NaN, which trl treats as "unknown": no correction).
* :class:`SearchRollout` (Search-R1): the turns of :mod:`inference.search_agent.loop`, sampled; the
  ``<information>`` ids are the environment's (``env_mask`` 0). With ``explore_ret`` the first turn of the same
  rows opens with ``<search>`` written for the policy, which then writes the query itself.

Sampling runs on the project's decoder over the model being trained; with ``use_vllm`` (GPU recipes, untested) the
policy's turns come from trl's vLLM engine instead (:mod:`training.grpo_vllm`).
"""

from __future__ import annotations

import math
from typing import Any

from adaptive_rag.lm.generation import generate_texts
from adaptive_rag.lm.sampling import Sampler
from adaptive_rag.lm.tokenization import prompt_ids
from adaptive_rag.plumbing.retriever import Retriever
from data_builders.adapt_llm_prompts import RET_TOKEN, context_prompt, parametric_prompt, response_text
from inference.adapt_gate.gate import passage_with_title
from inference.adapt_gate.ret_token import text_piece_ids
from inference.search_agent.decoding import decode_until, stop_ids
from inference.search_agent.loop import SearchSettings, run_search
from training.grpo_config import GrpoTaskConfig, GrpoTrainConfig
from training.grpo_vllm import vllm_decoder


def policy_model(trainer) -> Any:
    """The model being trained, as the rollout decodes with it (unwrapped from accelerate's wrappers)."""
    return trainer.accelerator.unwrap_model(trainer.model)


def rollout_sampler(train: GrpoTrainConfig, step: int) -> Sampler:
    """Sampling at trl's temperature (its loss recomputes log-probabilities at the same temperature), seeded per
    optimizer step so that a resumed run draws what the uninterrupted one would have."""
    return Sampler(temperature=train.temperature, seed=train.seed * 100_003 + step)


def forced_rows(n: int, group: int, share: float) -> set[int]:
    """The rows whose decision is set to ``<RET>``: the first ``round(group · share)`` of each group of ``group``
    consecutive rows."""
    per_group = round(group * share)
    return {i for i in range(n) if i % group < per_group}


class GateRollout:
    """ADAPT-LLM's decision, sampled; see the module docstring."""

    def __init__(self, tokenizer, retriever: Retriever, task: GrpoTaskConfig, train: GrpoTrainConfig):
        self.tokenizer, self.retriever, self.task, self.train = tokenizer, retriever, task, train
        special = task.ret_token == "special"
        self.ret_ids = [tokenizer.convert_tokens_to_ids(RET_TOKEN)] if special else text_piece_ids(tokenizer)
        self.eos = tokenizer.eos_token_id

    def __call__(self, prompts: list[str], trainer) -> dict[str, Any]:
        model = policy_model(trainer)
        group = getattr(trainer, "num_generations", self.train.num_generations)
        forced = forced_rows(len(prompts), group, self.task.explore_ret)
        first = [prompt_ids(self.tokenizer, parametric_prompt(q, self.task.prompt_variant)) for q in prompts]
        free = [i for i in range(len(prompts)) if i not in forced]
        decode = vllm_decoder(trainer) if self.train.use_vllm else decode_until
        decoded = decode(model, self.tokenizer, [first[i] for i in free],
                               max_new_tokens=self.train.max_new_tokens,
                               sampler=rollout_sampler(self.train, trainer.state.global_step),
                               batch_size=self.train.rollout_batch_size)
        completion_ids: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        ended = ["eos"] * len(prompts)
        for i, out in zip(free, decoded):
            completion_ids[i], logprobs[i], ended[i] = out.ids, out.logprobs, out.reason
        for i in forced:
            completion_ids[i] = self.ret_ids + ([self.eos] if self.eos is not None else [])
            logprobs[i] = [math.nan] * len(completion_ids[i])
        return {"prompt_ids": first, "completion_ids": completion_ids, "logprobs": logprobs,
                **self.outcomes(model, prompts, completion_ids, ended, forced)}

    def decision_text(self, ids: list[int]) -> str:
        stops = stop_ids(self.tokenizer)
        return self.tokenizer.decode([t for t in ids if t not in stops], skip_special_tokens=False)

    def outcomes(self, model, questions: list[str], completion_ids: list[list[int]], ended: list[str],
                 forced: set[int]) -> dict[str, list]:
        """What each decision led to: the answer, retrievals (0 or 1), and whether the decision kept the format (an
        answer without ``<RET>``, or ``<RET>`` alone, ended by EOS)."""
        texts = [self.decision_text(ids) for ids in completion_ids]
        retrieve = [RET_TOKEN in t for t in texts]
        answers: list[str | None] = [None if r else response_text(t) for r, t in zip(retrieve, texts)]
        well_formed = [e == "eos" and (t.strip() == RET_TOKEN if r else bool(a))
                       for e, t, r, a in zip(ended, texts, retrieve, answers)]
        rows = [i for i, r in enumerate(retrieve) if r]
        if rows:
            hits = self.retriever.search([questions[i] for i in rows], self.task.top_k)
            prompts = [context_prompt(questions[i], [passage_with_title(h.passage) for h in row] or [""],
                                      self.task.prompt_variant, self.task.max_passage_words)
                       for i, row in zip(rows, hits)]
            was_training = model.training
            model.eval()
            try:
                gens = generate_texts(model, self.tokenizer, prompts, max_new_tokens=self.task.answer_max_new_tokens,
                                      batch_size=self.train.rollout_batch_size, shared_head=False,
                                      banned_tokens=(RET_TOKEN,) if self.task.context_ban_ret else ())
            finally:
                model.train(was_training)
            for i, gen in zip(rows, gens):
                answers[i] = response_text(gen.text)
        return {"answer": answers, "retrievals": [int(r) for r in retrieve], "well_formed": well_formed,
                "forced": [i in forced for i in range(len(questions))]}


class SearchRollout:
    """Search-R1's turns, sampled; see the module docstring."""

    def __init__(self, tokenizer, retriever: Retriever, task: GrpoTaskConfig, train: GrpoTrainConfig):
        self.tokenizer, self.retriever, self.task, self.train = tokenizer, retriever, task, train
        self.settings = SearchSettings(max_searches=task.max_searches, top_k=task.top_k,
                                       turn_max_new_tokens=task.turn_max_new_tokens, chat=task.search_chat,
                                       batch_size=train.rollout_batch_size, max_passage_words=task.max_passage_words)

    def __call__(self, prompts: list[str], trainer) -> dict[str, Any]:
        group = getattr(trainer, "num_generations", self.train.num_generations)
        trajs = run_search(policy_model(trainer), self.tokenizer, self.retriever, prompts, self.settings,
                           sampler=rollout_sampler(self.train, trainer.state.global_step),
                           decode=vllm_decoder(trainer) if self.train.use_vllm else None,
                           opened=forced_rows(len(prompts), group, self.task.explore_ret))
        return {"prompt_ids": [t.prompt_ids for t in trajs], "completion_ids": [t.completion_ids for t in trajs],
                "logprobs": [t.logprobs for t in trajs], "env_mask": [t.env_mask for t in trajs],
                "answer": [t.answer for t in trajs], "retrievals": [len(t.searches) for t in trajs],
                "well_formed": [t.format.ok for t in trajs]}
