"""The ADAPT-LLM gate: answer from memory or emit <RET> and retrieve (gate.py), and the gate as an evaluation
method (gate_eval.py)."""
