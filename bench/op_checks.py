"""A built GEMM kernel (``C = A @ B``, two inputs, one output) as a PyTorch op on the GPU:
``torch.compile(fullgraph=True)`` over a small module that calls it twice (compared with eager
and with a float32 reference, no graph breaks), and a CUDA graph of 10 calls captured once and
replayed on new inputs (each output compared with a float32 reference).  Used by
bench/gpu_check.py (every ``gemm`` target: two rows of its ``api`` column) and by
bench/tune_gpu.py (the tuned kernel).  Results: ``compile_ok``, ``compile_rel_vs_eager``,
``eager_rel_vs_torch``, ``graph_breaks``, ``graph_ok``, ``graph_rel`` (relative errors, the
norm of the difference over the reference's), ``*_error`` on an exception."""

from __future__ import annotations

import traceback


def op_checks(torch, kern, op_name: str) -> dict:
    """Register ``kern`` (a loaded :class:`cypressc.runtime.Kernel`) as
    ``torch.ops.cypressc.<op_name>`` and run both checks in its element type."""
    import cypressc.torch as ctorch

    out: dict = {}
    op = ctorch.register(kern, name=op_name)
    call = getattr(torch.ops.cypressc, op_name)
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[kern.info.params[1].dtype]

    class Mlp(torch.nn.Module):
        def forward(self, x, w1, w2):
            h = call(x, w1).relu()
            return call(h, w2) * 0.5

    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(2048, 1024, device="cuda", generator=g).to(dt)
    w1 = (torch.randn(1024, 2048, device="cuda", generator=g) / 32).to(dt)
    w2 = (torch.randn(2048, 512, device="cuda", generator=g) / 45).to(dt)
    try:
        eager = Mlp()(x, w1, w2)
        explain = torch._dynamo.explain(Mlp())(x, w1, w2)
        torch._dynamo.reset()
        compiled = torch.compile(Mlp(), fullgraph=True)(x, w1, w2)
        torch.cuda.synchronize()
        ref = (torch.relu(x.float() @ w1.float()).to(dt).float() @ w2.float()) * 0.5
        out["compile_rel_vs_eager"] = float(
            (compiled.float() - eager.float()).norm() / eager.float().norm()
        )
        out["eager_rel_vs_torch"] = float((eager.float() - ref).norm() / ref.norm())
        out["graph_breaks"] = explain.graph_break_count
        out["compile_ok"] = (
            out["compile_rel_vs_eager"] < 1e-3
            and out["eager_rel_vs_torch"] < 1e-2
            and explain.graph_break_count == 0
        )
    except Exception as e:  # noqa: BLE001
        out["compile_ok"] = False
        out["compile_error"] = f"{type(e).__name__}: {e}"[:500]
        traceback.print_exc()
    try:
        As = [torch.randn(1024, 512, device="cuda").to(dt) for _ in range(10)]
        B = torch.randn(512, 768, device="cuda").to(dt)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for a in As:
                op(a, B)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = [op(a, B) for a in As]
        worst = 0.0
        for _ in range(2):
            for a in As:
                a.copy_(torch.randn_like(a, dtype=torch.float32).to(dt))
            graph.replay()
            torch.cuda.synchronize()
            for a, c in zip(As, outs):
                ref = a.float() @ B.float()
                worst = max(worst, float((c.float() - ref).norm() / ref.norm()))
        out["graph_rel"] = worst
        out["graph_ok"] = worst < 1e-2
    except Exception as e:  # noqa: BLE001
        out["graph_ok"] = False
        out["graph_error"] = f"{type(e).__name__}: {e}"[:500]
        traceback.print_exc()
    return out


def as_api_rows(r: dict) -> list[dict]:
    """The two results as rows of bench/gpu_check.py's ``api`` column."""
    return [
        {
            "case": "torch.compile(fullgraph)",
            "ok": bool(r.get("compile_ok")),
            "msg": r.get("compile_error")
            or f"rel vs eager {r.get('compile_rel_vs_eager', float('nan')):.1e}, eager vs "
            f"torch {r.get('eager_rel_vs_torch', float('nan')):.1e}, {r.get('graph_breaks')} graph break(s)",
        },
        {
            "case": "CUDA graph, 10 calls replayed",
            "ok": bool(r.get("graph_ok")),
            "msg": r.get("graph_error")
            or f"worst rel {r.get('graph_rel', float('nan')):.1e} over 2 replays",
        },
    ]
