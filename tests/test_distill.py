"""Distillation: the student's soft loss against hand-computed cross-entropies and enumerated CRF
paths, the teacher kept out of the student, and `ner distill` end to end on a tiny model."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import ROOT, one_line_error, run_ner, tiny_tagger_batch
from test_crf import all_paths, make_crf, random_problem

from ner.cli.distill import parser, seeds_args
from ner.model.distill import Teacher, distillation_loss
from ner.model.tagger import load_tagger
from ner.modules.heads import IGNORE, LinearHead
from ner.utils.errors import NERError


def test_log_marginals_are_the_log_of_enumerated_path_marginals():
    emissions, mask, params = random_problem(4, holes=True)
    emissions.requires_grad_(True)
    log_p = make_crf(params).log_marginals(emissions, mask)
    values = log_p.detach()
    for b in range(len(mask)):
        paths = list(all_paths(emissions[b].detach(), mask[b], params))
        log_z = math.log(sum(math.exp(s) for _, _, s in paths))
        for p in range(mask.shape[1]):
            if not mask[b, p]:
                assert torch.all(values[b, p] == 0)
                continue
            for t in range(3):
                want = sum(math.exp(s - log_z) for pos, tags, s in paths if tags[pos.index(p)] == t)
                assert float(values[b, p, t]) == pytest.approx(math.log(want), abs=1e-9)
    log_p.sum().backward()  # differentiable, and finite everywhere
    assert torch.isfinite(emissions.grad).all()


def test_soft_loss_of_a_softmax_head_is_the_cross_entropy_by_hand():
    head = LinearHead()
    head.bind(2, ["O", "B-PER", "I-PER"])
    emissions = torch.tensor([[[1.0, 2.0, 0.5], [0.0, -1.0, 3.0], [9.0, 9.0, 9.0]]])
    targets = torch.tensor([[[0.2, 0.7, 0.1], [0.5, 0.0, 0.5], [1.0, 0.0, 0.0]]])
    labels = torch.tensor([[0, 1, IGNORE]])  # the third word is unlabelled: it does not count
    mask = torch.tensor([[True, True, True]])
    expected = 0.0
    for row, target in zip(emissions[0, :2].tolist(), targets[0, :2].tolist(), strict=True):
        log_z = math.log(sum(math.exp(x) for x in row))
        expected -= sum(q * (x - log_z) for q, x in zip(target, row, strict=True))
    got = distillation_loss(head, emissions, targets, labels, mask)
    assert float(got) == pytest.approx(expected / 2, rel=1e-6)
    # one-hot targets of the gold tags: the soft loss is the head's own loss
    one_hot = torch.nn.functional.one_hot(labels.clamp(min=0), 3).float()
    gold = head.loss(emissions, labels, mask)
    assert float(distillation_loss(head, emissions, one_hot, labels, mask)) == pytest.approx(
        float(gold), rel=1e-6
    )


def test_soft_loss_of_a_crf_head_ignores_tags_the_teacher_rules_out(tiny_model_dir):
    """IOB2 forbids I- after O: its log-marginal is -inf, its target 0; the loss stays finite."""
    model, batch = tiny_tagger_batch(tiny_model_dir, 5)
    batch = {k: v.clone() if torch.is_tensor(v) else v for k, v in batch.items()}  # not inference
    with torch.no_grad():
        emissions = model(batch).requires_grad_(True)
    targets = model.head.probabilities(emissions.detach(), batch["word_mask"])
    labels = torch.zeros_like(batch["word_mask"], dtype=torch.long)
    loss = distillation_loss(model.head, emissions, targets, labels, batch["word_mask"])
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(emissions.grad).all()
    # the loss against its own marginals is their mean entropy, the least over all targets
    probs = targets[batch["word_mask"]]
    entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1).mean()
    assert float(loss) == pytest.approx(float(entropy), rel=1e-5)


def test_the_teacher_stays_out_of_the_student(trained):
    teacher = Teacher([str(trained["ckpt"] / "best.ckpt")], weight=0.3)
    student = load_tagger(trained["ckpt"] / "last.ckpt").train()
    object.__setattr__(student, "teacher", teacher)
    teacher.attach(student, load_tagger)
    assert not any(name.startswith("teacher") for name in student.state_dict())
    optimised = {id(p) for group in student.optimizer().param_groups for p in group["params"]}
    assert not optimised & {id(p) for p in teacher.parameters()}
    assert all(p.requires_grad is False for p in teacher.parameters())
    teacher.train()
    assert not teacher.ensemble.training  # never in training mode: no dropout in its targets


def test_the_training_loss_mixes_gold_and_soft_by_the_weight(trained, tiny_model_dir):
    _, batch = tiny_tagger_batch(tiny_model_dir, 7, crf=False)  # a batch of the same tokenizer
    teacher = Teacher([str(trained["ckpt"] / "best.ckpt")])
    student = load_tagger(trained["ckpt"] / "last.ckpt")
    teacher.attach(student, load_tagger)
    batch = {k: v.clone() if torch.is_tensor(v) else v for k, v in batch.items()}
    batch["labels"] = torch.where(batch["word_mask"], 1, IGNORE)
    logged = {}
    student.log = lambda name, value, **_: logged.__setitem__(name, float(value))
    with torch.no_grad():
        emissions = student(batch)
        gold = student.head.loss(emissions, batch["labels"], batch["word_mask"])
        # the teacher's targets are its own tagger's word distributions on the same batch
        alone = load_tagger(trained["ckpt"] / "best.ckpt")
        want = alone.head.probabilities(alone(batch), batch["word_mask"])
        want = want * batch["word_mask"].unsqueeze(-1)  # [B, W, C], 0 on padding as the targets
        assert torch.allclose(teacher.targets(batch), want, atol=1e-6)
        soft = distillation_loss(student.head, emissions, want, batch["labels"], batch["word_mask"])
        for weight in (0.0, 0.25, 1.0):
            teacher.weight = weight
            mixed = teacher.mix(student, batch, emissions, gold)
            assert float(mixed) == pytest.approx(
                float((1 - weight) * gold + weight * soft), rel=1e-5
            )
    assert logged["train/gold_loss"] == pytest.approx(float(gold))
    assert logged["train/distill_loss"] == pytest.approx(float(soft), rel=1e-5)


def test_teacher_errors_name_the_option(trained, tiny_model_dir):
    with pytest.raises(NERError, match=r"weight 1.5 is not in \[0, 1\]"):
        Teacher([str(trained["ckpt"] / "best.ckpt")], weight=1.5)
    teacher = Teacher([str(trained["ckpt"] / "best.ckpt")])
    student, _ = tiny_tagger_batch(tiny_model_dir, 6)
    with pytest.raises(NERError, match="labels") as error:
        teacher.attach(student, load_tagger)
    assert "model.teacher.checkpoints" in str(error.value)


def test_distill_arguments_name_the_run_and_the_teacher():
    args, rest = parser().parse_known_args(
        ["--teachers", "a.ckpt", "b.ckpt", "--weight", "0.7", "--experiment", "quick", "--test"]
    )
    argv = seeds_args(args, rest)
    assert argv[:5] == ["--experiment", "quick", "--test", "--run", "distill/quick"]
    teacher = json.loads(argv[-1].split("=", 1)[1])
    assert teacher == {
        "class_path": "ner.model.distill.Teacher",
        "init_args": {"checkpoints": ["a.ckpt", "b.ckpt"], "weight": 0.7},
    }
    args, rest = parser().parse_known_args(["--teachers", "a.ckpt", "--run=mine"])
    default = str(ROOT / "configs" / "conll2003-minilm.yaml")
    assert seeds_args(args, rest)[:3] == ["-c", default, "--run=mine"]
    args, rest = parser().parse_known_args(["--teachers", "a.ckpt"])
    assert seeds_args(args, rest)[:4] == ["-c", default, "--run", "distill/conll2003-minilm"]


def test_ner_distill_trains_a_student_apart_from_its_teacher(
    trained, tiny_model_dir, tiny_corpus_dir, capsys
):
    teacher = trained["ckpt"] / "best.ckpt"
    before = teacher.read_bytes()
    argv = ["distill", "--teachers", str(teacher), "--seeds", "1", "--weight", "0.5",
            "-c", str(ROOT / "configs" / "trainer.yaml"), "--model.encoder", str(tiny_model_dir),
            "--data.data_dir", str(tiny_corpus_dir), "--trainer.max_epochs", "1",
            "--trainer.enable_progress_bar", "false"]  # fmt: skip
    code, out, err = run_ner(argv, capsys)
    assert code == 0, err
    assert teacher.read_bytes() == before
    saved = json.loads(open("runs/distill/trainer/seeds.json").read())
    assert saved["runs"][0]["checkpoint"].endswith("checkpoints/distill/trainer/seed-1/best.ckpt")
    student = load_tagger(saved["runs"][0]["checkpoint"])
    assert student.labels == load_tagger(teacher).labels
    assert "mean ± std" in out


def test_ner_distill_with_a_missing_teacher_is_one_line(tiny_corpus_dir, capsys):
    argv = ["distill", "--teachers", "missing.ckpt", "--seeds", "1",
            "-c", str(ROOT / "configs" / "trainer.yaml"),
            "--data.data_dir", str(tiny_corpus_dir)]  # fmt: skip
    code, _, err = run_ner(argv, capsys)
    assert "missing.ckpt" in one_line_error(code, err)
