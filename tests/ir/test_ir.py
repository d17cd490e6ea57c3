"""The IR: structural nodes, topological order, rewriting and the SSA listing."""

from __future__ import annotations

from coda.errors import Loc
from coda.ir import Epilogue, Node, Output, Param, format_epilogue, rewrite, toposort


def _x():
    return Node("input")


def test_nodes_compare_structurally_ignoring_location():
    a = Node("add", (_x(), Node("const", (), 1.0)), loc=Loc(1, 1))
    b = Node("add", (_x(), Node("const", (), 1.0)), loc=Loc(7, 3))
    assert a == b and hash(a) == hash(b) and a is not b
    assert a != Node("add", (_x(), Node("const", (), 2.0)))
    assert a != Node("sub", (_x(), Node("const", (), 1.0)))
    assert Node("operand", (), "x") != Node("operand", (), "y")
    assert Node("unpack", (_x(),), 0) != Node("unpack", (_x(),), 1)
    assert len({a, b}) == 1


def test_constants_compare_by_their_bits():
    """-0.0 == 0.0 in Python, but 1 / x tells them apart: two nodes, not one that `cse` would
    share; a NaN constant is one node (NaN != NaN would keep equal programs apart)."""
    assert Node("const", (), -0.0) != Node("const", (), 0.0)
    assert Node("const", (), float("nan")) == Node("const", (), float("nan"))
    assert len({Node("const", (), -0.0), Node("const", (), 0.0), Node("const", (), 0.0)}) == 2


def test_with_args_keeps_the_node_when_nothing_changes():
    a = Node("neg", (_x(),), loc=Loc(2, 2))
    assert a.with_args(a.args) is a
    c = Node("const", (), 3.0)
    b = a.with_args((c,))
    assert b.args == (c,) and b.op == "neg" and b.loc == Loc(2, 2)


def test_toposort_visits_each_structural_node_once_after_its_args():
    x = _x()
    h = Node("add", (x, Node("operand", (), "bias")))
    g1 = Node("gelu", (h,))
    g2 = Node("gelu", (Node("add", (_x(), Node("operand", (), "bias"))),))   # equal to g1
    out = Node("mul", (g1, g2))
    order = toposort([out])
    assert [n.op for n in order] == ["input", "operand", "add", "gelu", "mul"]
    position = {n: i for i, n in enumerate(order)}
    for node in order:
        for arg in node.args:
            assert position[arg] < position[node]


def test_toposort_of_a_deep_chain_does_not_recurse():
    node = _x()
    for i in range(5000):
        node = Node("add", (node, Node("const", (), float(i))))
    assert len(toposort([node])) == 1 + 2 * 5000


def test_two_deep_chains_built_apart_compare_without_recursing():
    def chain(last: float) -> Node:
        node = _x()
        for i in range(5000):
            node = Node("add", (node, Node("const", (), float(i))))
        return Node("mul", (node, Node("const", (), last)))

    assert chain(1.0) == chain(1.0) and chain(1.0) is not chain(1.0)
    assert chain(1.0) != chain(2.0)


def test_two_equal_chains_traced_apart_compile():
    """A traced loop run twice builds equal chains that share no node; `cse` compares them."""
    import coda

    def chain(x):
        for _ in range(300):
            x = x * 1.0001 + 0.5
        return x

    difference = coda.epilogue(lambda acc: chain(acc) - chain(acc)).ir.outputs[0].value
    assert difference.op == "sub" and difference.args[0] is difference.args[1]


def _epi(outputs, params=None):
    return Epilogue("e", params or {}, tuple(outputs))


def test_rewrite_rebuilds_bottom_up_and_keeps_sharing():
    x = _x()
    two = Node("const", (), 2.0)
    y = Node("mul", (x, two))
    epi = _epi([Output("output", Node("add", (y, y))), Output("s", y, "row_sum")])

    def rule(node):
        return Node("const", (), 3.0) if node.op == "const" else node

    new = rewrite(epi, rule)
    assert new.outputs[1].value == Node("mul", (x, Node("const", (), 3.0)))
    assert new.outputs[0].value.args[0] is new.outputs[0].value.args[1]
    assert new.outputs[1].reduction == "row_sum" and new.outputs[1].axis == "row"


def test_epilogue_flags_and_format():
    prior = Node("prior")
    x = _x()
    params = {"p": Param("p", "scalar"), "t": Param("t", None, declared=False)}
    drop = Node("dropout", (x, Node("operand", (), "p")))
    epi = _epi([Output("output", Node("add", (prior, drop))),
                Output("c", Node("operand", (), "t"), "col_max")], params)
    assert epi.accumulates and epi.uses_dropout
    assert format_epilogue(epi) == "\n".join([
        "epilogue e(p: scalar, t: ?)",
        "  %0 = prior",
        "  %1 = input",
        "  %2 = operand ['p']",
        "  %3 = dropout %1 %2",
        "  %4 = add %0 %3",
        "  %5 = operand ['t']",
        "  output <- %4",
        "  c <- col_max %5",
    ])
    assert epi.outputs[1].axis == "col" and epi.outputs[0].axis is None
    plain = _epi([Output("output", x)])
    assert not plain.accumulates and not plain.uses_dropout


def test_a_long_program_copies_and_pickles_without_recursion():
    """Pickling a node pickles its arguments first, so a chain of 1500 statements raised
    RecursionError in pickle.dumps and copy.deepcopy of its Program; an Epilogue is now pickled
    as a flat list of its nodes. The copies are equal node for node (a constant by its bits:
    -0.0 stays -0.0), keep the nodes' locations and compute what the original does."""
    import copy
    import pickle

    import torch

    import coda

    prog = coda.compile("EPILOGUE f(t: tile) { h = input * -0.0;" + " h = h + t;" * 1500
                        + " output = h; s = row_sum(h); }")
    a, b = torch.randn(3, 2, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    t = torch.randn(3, 4, dtype=torch.float64)
    want = prog.reference(a, b, t=t)
    for twin in (copy.deepcopy(prog), pickle.loads(pickle.dumps(prog))):
        assert twin.ir == prog.ir and twin.ir.outputs == prog.ir.outputs
        assert [n.loc for n in twin.ir.nodes()] == [n.loc for n in prog.ir.nodes()]
        got = twin.reference(a, b, t=t)
        assert all(torch.equal(got[k], want[k]) for k in want)
