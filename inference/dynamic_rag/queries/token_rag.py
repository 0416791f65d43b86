"""Their TokenRAG's query (``query_formulation: direct``): the hallucinated sentence with its unsure tokens taken
out (``curr.replace("[xxx]", "")``): the text of each hit token goes, the space before it stays."""

from __future__ import annotations

from inference.dynamic_rag.queries import QueryFormer, register_query


@register_query("token_rag")
class TokenRagQuery(QueryFormer):
    def form(self, view, event, cfg) -> str:
        end = view.sentence_end(event.token)
        hits = {t for word in event.hits for t in word}
        kept = [p[: len(p) - len(p.lstrip())] if i in hits else p
                for i, p in enumerate(view.pieces[event.token:end], start=event.token)]
        return "".join(kept).strip()
