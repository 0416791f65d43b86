"""The multi-turn search policy as an evaluation method (``--method search-r1``): greedy turns of Search-R1's
protocol (:mod:`inference.search_agent.loop`), one prediction record per question.

The record's ``output`` is the text of the last ``<answer>`` block (the policy's last turn when it wrote none), and
each search is a retrieval record: its round (the turn), the query the policy wrote, the passages returned.
"""

from __future__ import annotations

import time

from adaptive_rag.plumbing.records import PredictionRecord, QAExample, RetrievalRecord
from adaptive_rag.plumbing.retriever import Retriever
from inference.search_agent.loop import SearchSettings, Trajectory, run_search


def trajectory_record(ex: QAExample, traj: Trajectory, seconds: float) -> PredictionRecord:
    """A trajectory as the evaluate command's prediction record."""
    output = traj.answer if traj.answer is not None else (traj.turns[-1].strip() if traj.turns else "")
    retrievals = [RetrievalRecord(round=turn + 1, query=q, doc_ids=list(ids))
                  for turn, (q, ids) in enumerate(traj.searches)]
    return PredictionRecord(id=ex.id, question=ex.question, answers=list(ex.answers), output=output,
                            retrievals=retrievals, llm_forward_passes=traj.generated_tokens + len(traj.turns),
                            generated_tokens=traj.generated_tokens, batch_mean_seconds=seconds,
                            rounds=len(traj.turns))


class SearchAgent:
    """Runs the trained search policy greedily over questions."""

    def __init__(self, model, tokenizer, retriever: Retriever, settings: SearchSettings | None = None):
        self.model, self.tokenizer, self.retriever = model, tokenizer, retriever
        self.settings = settings or SearchSettings()

    def run(self, examples: list[QAExample]) -> list[PredictionRecord]:
        start = time.perf_counter()
        trajs = run_search(self.model, self.tokenizer, self.retriever, [ex.question for ex in examples],
                           self.settings)
        seconds = (time.perf_counter() - start) / max(1, len(examples))  # the chunk's wall time shared evenly
        return [trajectory_record(ex, t, seconds) for ex, t in zip(examples, trajs)]


def search_agent_runner(model, tokenizer, retriever: Retriever, method, prompt, engine):
    """The evaluate command's runner for ``search-r1`` (the signature of its other runners): ``--top_k`` passages
    per search, ``--max_rounds`` searches at most, ``--max_new_tokens`` per turn, ``--batch_size`` rows,
    ``--search_max_passage_words`` words per passage."""
    resolved = method.resolved()
    # DRAGIN's reference profile leaves max_rounds unset (its loops' own ends bound it); search turns have no such
    # end, so the search loop's own default caps them
    searches = resolved.max_rounds if resolved.max_rounds is not None else SearchSettings.max_searches
    settings = SearchSettings(max_searches=searches, top_k=resolved.top_k,
                              turn_max_new_tokens=engine.max_new_tokens or SearchSettings.turn_max_new_tokens,
                              batch_size=engine.batch_size if isinstance(engine.batch_size, int) else 16,
                              max_passage_words=method.search_max_passage_words)
    agent = SearchAgent(model, tokenizer, retriever, settings)
    return agent.run
