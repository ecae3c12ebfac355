"""Detection metrics from scratch (NumPy): IoU variants, NMS, soft-NMS, VOC and COCO AP.

Boxes are (x1, y1, x2, y2) with x2 > x1, y2 > y1 (continuous coordinates, no +1).
The lab notebooks/algorithm/detection-metrics.ipynb checks NMS against ONNX Runtime's
NonMaxSuppression operator and COCO AP against pycocotools; tests/test_algorithm_detection.py
repeats the checks on smaller inputs.
"""
from __future__ import annotations

import math

import numpy as np


# --8<-- [start:iou]
def box_iou_variants(a, b, eps=1e-9):
    """Pairwise IoU, GIoU, DIoU and CIoU between boxes a (N, 4) and b (M, 4)."""
    a, b = np.asarray(a, float)[:, None, :], np.asarray(b, float)[None, :, :]
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    iw = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
    ih = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
    inter = iw * ih
    union = area_a + area_b - inter
    iou = inter / (union + eps)
    # smallest enclosing box C
    cw = np.maximum(a[..., 2], b[..., 2]) - np.minimum(a[..., 0], b[..., 0])
    ch = np.maximum(a[..., 3], b[..., 3]) - np.minimum(a[..., 1], b[..., 1])
    giou = iou - (cw * ch - union) / (cw * ch + eps)
    # normalised distance between centres: rho^2 / c^2 (c = diagonal of C)
    rho2 = ((a[..., 0] + a[..., 2] - b[..., 0] - b[..., 2]) ** 2
            + (a[..., 1] + a[..., 3] - b[..., 1] - b[..., 3]) ** 2) / 4.0
    c2 = cw ** 2 + ch ** 2 + eps
    diou = iou - rho2 / c2
    # aspect-ratio consistency v and its trade-off weight alpha
    v = (4 / math.pi ** 2) * (np.arctan((b[..., 2] - b[..., 0]) / (b[..., 3] - b[..., 1]))
                              - np.arctan((a[..., 2] - a[..., 0]) / (a[..., 3] - a[..., 1]))) ** 2
    alpha = np.divide(v, 1 - iou + v, out=np.zeros_like(v), where=v > 0)
    ciou = diou - alpha * v
    return {"iou": iou, "giou": giou, "diou": diou, "ciou": ciou}
# --8<-- [end:iou]


# --8<-- [start:nms]
def nms(boxes, scores, iou_threshold):
    """Greedy NMS: keep the best box, drop every box with IoU > threshold, repeat."""
    order = np.argsort(-np.asarray(scores), kind="stable")
    keep = []
    while order.size:
        i = order[0]
        keep.append(int(i))
        iou = box_iou_variants(boxes[i:i + 1], boxes[order[1:]])["iou"][0]
        order = order[1:][iou <= iou_threshold]
    return np.array(keep, dtype=np.int64)


def soft_nms(boxes, scores, sigma=0.5, score_threshold=1e-3):
    """Gaussian soft-NMS: decay overlapping scores by exp(-IoU^2 / sigma) instead of deleting."""
    scores = np.asarray(scores, float).copy()
    idx = np.arange(len(scores))
    keep, kept_scores = [], []
    while idx.size:
        k = int(np.argmax(scores[idx]))
        i = idx[k]
        keep.append(int(i))
        kept_scores.append(scores[i])
        idx = np.delete(idx, k)
        if idx.size:
            iou = box_iou_variants(boxes[i:i + 1], boxes[idx])["iou"][0]
            scores[idx] *= np.exp(-(iou ** 2) / sigma)
            idx = idx[scores[idx] > score_threshold]
    return np.array(keep, dtype=np.int64), np.array(kept_scores)
# --8<-- [end:nms]


# --8<-- [start:ap]
def match_detections(gt, dets, thr):
    """Greedy matching in score order. gt: (G, 4); dets: (D, 4) already sorted by score.
    Each detection takes the unmatched ground truth with the highest IoU >= thr."""
    tp = np.zeros(len(dets), bool)
    if len(gt) == 0 or len(dets) == 0:
        return tp
    iou = box_iou_variants(dets, gt, eps=0.0)["iou"]
    taken = np.zeros(len(gt), bool)
    for d in range(len(dets)):
        cand = np.where(taken, -1.0, iou[d])
        g = int(np.argmax(cand))
        if cand[g] >= thr:
            taken[g], tp[d] = True, True
    return tp


def precision_recall(images, thr):
    """images: list of (gt_boxes, det_boxes, det_scores) for one class."""
    scores, tps, n_gt = [], [], 0
    for gt, dets, sc in images:
        order = np.argsort(-np.asarray(sc), kind="mergesort")
        tps.append(match_detections(np.asarray(gt, float).reshape(-1, 4),
                                    np.asarray(dets, float).reshape(-1, 4)[order], thr))
        scores.append(np.asarray(sc)[order])
        n_gt += len(gt)
    order = np.argsort(-np.concatenate(scores), kind="mergesort")
    tp = np.concatenate(tps)[order]
    ctp, cfp = np.cumsum(tp), np.cumsum(~tp)
    return ctp / max(n_gt, 1), ctp / np.maximum(ctp + cfp, np.finfo(float).eps), n_gt


def ap_voc(recall, precision, eleven_point=False):
    """VOC AP: area under the monotone (upper envelope) PR curve; VOC2007 used 11 points."""
    if eleven_point:
        return float(np.mean([precision[recall >= t].max() if (recall >= t).any() else 0.0
                              for t in np.linspace(0, 1, 11)]))
    r = np.concatenate([[0.0], recall, [1.0]])
    p = np.concatenate([[0.0], precision, [0.0]])
    p = np.maximum.accumulate(p[::-1])[::-1]          # precision envelope
    i = np.flatnonzero(r[1:] != r[:-1])
    return float(np.sum((r[i + 1] - r[i]) * p[i + 1]))


def ap_coco(recall, precision):
    """COCO AP at one IoU threshold: envelope sampled at 101 recall points 0, 0.01, ..., 1."""
    p = np.maximum.accumulate(precision[::-1])[::-1] if len(precision) else precision
    out = np.zeros(101)
    idx = np.searchsorted(recall, np.linspace(0, 1, 101), side="left")
    ok = idx < len(p)
    out[ok] = p[idx[ok]]
    return float(out.mean())


def coco_map(per_class_images):
    """AP@[.5:.95]: mean over classes (with ground truth) and IoU thresholds .50:.05:.95."""
    thrs = np.linspace(0.5, 0.95, 10)
    table = []
    for images in per_class_images:
        row = []
        for t in thrs:
            rec, prec, n_gt = precision_recall(images, t)
            row.append(ap_coco(rec, prec) if n_gt else np.nan)
        table.append(row)
    table = np.array(table)
    return float(np.nanmean(table)), table
# --8<-- [end:ap]
