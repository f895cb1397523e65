"""The math verifier behind reward.py: everything that reads a model's answer and decides whether it
equals the gold, and nothing about training.

    extract.py    the final answer of a response: the last marker (box, `Answer:` line, `<answer>` tag, ...)
    boxes.py      which box a response's answer is, and what a box holding a derivation concludes
    prose.py      the value a sentence states, and the closing sentence of a solution with no marker
    normalize.py  formatting stripped: thousands separators, units, currency, names, decimal commas
    tokens.py     the tokenizer and allow-listed vocabulary of the parser
    parse.py      an allow-listed recursive-descent parser from LaTeX / plain math to sympy values
    values.py     the parser's value types and size-capped sympy constructors
    equal.py      exact equality of parsed answers: numbers, sets, tuples, intervals, equations
    verdict.py    one answer against its gold: string work first, then parse and compare
    pool.py       killable, memory-capped worker processes that run verdict.sympy_verdict
    dapo.py       verl's DAPO reward (reward.mode dapo), reimplemented in linear time

Model text is never executed: nothing here calls eval, exec, sympify or parse_expr.
"""
