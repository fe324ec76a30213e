"""NPU439 prompt-turn-supervised."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class PromptTurnSupervised(Rule):
    code = "NPU439"
    name = "prompt-turn-supervised"
    summary = (
        "A chat template's label builder makes a prompt turn a training target: the default supervision flag is "
        "set for a user/system/tool message, or the unsupervised branch appends the token ids instead of the "
        "ignore index, or a message's ids are labelled whole, role header included."
    )
    why = (
        "Supervised fine-tuning trains on the assistant's answers only: a message's tokens enter `labels` when the "
        "message is the assistant's (or the data sets `loss_mask` explicitly), and every other position is "
        '`IGNORE_INDEX`. A default flag that is 1 for a user turn (`message.get("loss_mask", 1)`, '
        '`0 if role == "system" else 1`), or an `else:` branch that labels the content anyway, makes the model '
        "learn to write the prompts; the loss-token count grows with them and the loss falls as if training went "
        "well. The check evaluates a supervision default (a `loss_mask` key or local reading the message's role) "
        "for each role, and compares the two branches of an `if` on the flag or the role that appends to `labels`."
    )
    bad = (
        Example(
            """
            IGNORE_INDEX = -100


            def encode(tokenizer, messages):
                labels = []
                for message in messages:
                    ids = tokenizer.encode(message["content"])
                    loss_mask = message.get("loss_mask", 0 if message["role"] == "system" else 1)
                    labels.extend(ids if loss_mask == 1 else [IGNORE_INDEX] * len(ids))
                return labels
            """,
            path="veomni/data/toy_chat_template.py",
            title="a user turn is supervised by default",
        ),
        Example(
            """
            IGNORE_INDEX = -100


            def encode(tokenizer, messages):
                labels = []
                for message in messages:
                    ids = tokenizer.encode(message["content"])
                    if message["loss_mask"] == 1:
                        labels += ids
                    else:
                        labels += ids
                return labels
            """,
            path="veomni/data/toy_chat_template.py",
            title="both branches label the content",
        ),
    )
    good = (
        Example(
            """
            IGNORE_INDEX = -100


            def encode(tokenizer, messages):
                labels = []
                for message in messages:
                    ids = tokenizer.encode(message["content"])
                    loss_mask = message.get("loss_mask", int(message["role"] == "assistant"))
                    if loss_mask == 1:
                        labels += ids
                    else:
                        labels += [IGNORE_INDEX] * len(ids)
                return labels
            """,
            path="veomni/data/toy_chat_template.py",
            title="assistant-only by default",
        ),
    )
    fix_safety = "No fix."
    requires = (("loss_mask", "role"), "labels")
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        for where, fault in losspath.supervision_default_faults(node):
            if not first_report(self, where):
                continue
            self.report(
                where,
                f"the default supervision flag `{ast.unparse(where)}` marks a prompt turn as a training target "
                f"({fault}): only assistant turns are labelled unless the data says otherwise",
            )
        for where, text in losspath.unmasked_branch_faults(node):
            if not first_report(self, where):
                continue
            self.report(
                where,
                f"the unsupervised branch appends `{text}` to the labels, the token ids themselves: prompt tokens "
                "become training targets (append `[IGNORE_INDEX] * len(...)` there)",
            )
        for where, name in losspath.supervised_header_faults(node):
            if not first_report(self, where):
                continue
            self.report(
                where,
                f"the supervised branch labels `{name}` whole, and `{name}` begins with the encoded role header "
                "(`<|im_start|>assistant` ...): the fixed header tokens become training targets (mask the header's "
                f"length with `IGNORE_INDEX` and label `{name}[header_len:]`)",
            )
