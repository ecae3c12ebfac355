"""code/algorithm/detection.py against closed forms, ONNX Runtime's NonMaxSuppression
operator and pycocotools' COCOeval (torchvision does not load with the CPU torch build)."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import math

import numpy as np
import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("algorithm_detection", ROOT / "code" / "algorithm" / "detection.py")
det = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(det)


def rand_boxes(n, rng, scale=1.0):
    xy = rng.uniform(0, 90, (n, 2))
    wh = rng.uniform(4, 40, (n, 2))
    return np.concatenate([xy, xy + wh], 1) * scale


def test_iou_variants_closed_forms():
    a = np.array([[0.0, 0.0, 2.0, 2.0]])
    b = np.array([[1.0, 1.0, 3.0, 3.0], [4.0, 0.0, 6.0, 2.0], [0.0, 0.0, 2.0, 2.0]])
    r = det.box_iou_variants(a, b, eps=0.0)
    assert np.allclose(r["iou"][0], [1 / 7, 0.0, 1.0])
    # disjoint boxes: IoU is 0 whatever the gap, GIoU = -(C - U)/C = -(12 - 8)/12
    assert np.isclose(r["giou"][0, 1], -4 / 12)
    # DIoU: centres (1,1) and (2,2), enclosing box 3x3 -> rho^2/c^2 = 2/18
    assert np.isclose(r["diou"][0, 0], 1 / 7 - 2 / 18)
    # same aspect ratio -> v = 0 -> CIoU = DIoU
    assert np.allclose(r["ciou"], r["diou"])
    c = det.box_iou_variants(a, np.array([[0.0, 0.0, 4.0, 1.0]]), eps=0.0)
    v = 4 / math.pi ** 2 * (math.atan(4.0) - math.atan(1.0)) ** 2
    iou = 2 / 6
    assert np.isclose(c["ciou"][0, 0], c["diou"][0, 0] - v / (1 - iou + v) * v)
    assert np.all(r["giou"] <= r["iou"] + 1e-12) and np.all(r["giou"] >= -1)


def test_ciou_range_reaches_below_minus_one():
    # a flat wide box and a far-away thin tall one: IoU = 0, rho^2/c^2 -> 1, v -> 1,
    # alpha v = v^2/(1+v) -> 1/2, so CIoU approaches -1.5 (the page's range (-1.5, 1])
    r = det.box_iou_variants([[0, 0, 100, 0.01]], [[1e5, 1e5, 1e5 + 0.01, 1e5 + 100]])
    assert r["iou"][0, 0] == 0 and r["diou"][0, 0] > -1
    assert -1.5 < r["ciou"][0, 0] < -1.49
    rng = np.random.default_rng(4)
    a, b = rand_boxes(300, rng), rand_boxes(300, rng)
    c = det.box_iou_variants(a, b)
    assert np.all(c["ciou"] > -1.5) and np.all(c["ciou"] <= c["diou"] + 1e-12)


def test_giou_keeps_a_gradient_when_boxes_do_not_overlap():
    a = np.array([[0.0, 0.0, 1.0, 1.0]])
    far = [det.box_iou_variants(a, np.array([[x, 0.0, x + 1, 1.0]]))["giou"][0, 0] for x in (2.0, 3.0, 5.0)]
    assert far[0] > far[1] > far[2]       # IoU is 0 for all three


def test_small_boxes_are_sensitive_to_offsets():
    # the numbers quoted on the page: a 2-pixel shift of an 8x8 and of a 64x64 box
    small = det.box_iou_variants([[0, 0, 8, 8]], [[2, 0, 10, 8]], eps=0.0)["iou"][0, 0]
    large = det.box_iou_variants([[0, 0, 64, 64]], [[2, 0, 66, 64]], eps=0.0)["iou"][0, 0]
    assert np.isclose(small, 48 / 80) and np.isclose(large, 3968 / 4224)


def _ort_nms(boxes, scores, thr):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_thr"], ["sel"],
                            center_point_box=0)
    graph = helper.make_graph(
        [node], "nms",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, None, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, None]),
         helper.make_tensor_value_info("max_out", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("iou", TensorProto.FLOAT, [1]),
         helper.make_tensor_value_info("score_thr", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("sel", TensorProto.INT64, [None, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"boxes": boxes[None][:, :, [1, 0, 3, 2]].astype(np.float32),   # ONNX wants (y1, x1, y2, x2)
             "scores": scores[None, None].astype(np.float32), "max_out": np.array([len(scores)]),
             "iou": np.array([thr], np.float32), "score_thr": np.array([0.0], np.float32)}
    return sess.run(None, feeds)[0][:, 2]


@pytest.mark.parametrize("thr", [0.3, 0.5, 0.7])
def test_nms_matches_onnxruntime(thr):
    rng = np.random.default_rng(2)
    boxes = rand_boxes(150, rng).astype(np.float32)
    scores = rng.random(150).astype(np.float32)
    assert np.array_equal(det.nms(boxes.astype(np.float64), scores, thr), _ort_nms(boxes, scores, thr))


def test_soft_nms_decays_instead_of_deleting():
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [50, 50, 60, 60]], float)
    scores = np.array([0.9, 0.8, 0.7])
    keep, kept = det.soft_nms(boxes, scores, sigma=0.5)
    iou = 9 / 11
    assert keep.tolist() == [0, 2, 1]
    assert np.isclose(kept[2], 0.8 * math.exp(-iou ** 2 / 0.5))
    assert det.nms(boxes, scores, 0.5).tolist() == [0, 2]


def test_voc_ap_of_a_hand_example():
    # 3 ground truths; ranked detections T F T F T
    recall = np.array([1, 1, 2, 2, 3]) / 3
    precision = np.array([1, 1 / 2, 2 / 3, 2 / 4, 3 / 5])
    assert np.isclose(det.ap_voc(recall, precision), (1 + 2 / 3 + 3 / 5) / 3)
    eleven = np.mean([1.0] * 4 + [2 / 3] * 3 + [3 / 5] * 4)
    assert np.isclose(det.ap_voc(recall, precision, eleven_point=True), eleven)


def test_coco_map_matches_pycocotools():
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    rng = np.random.default_rng(3)
    n_img, n_cls = 12, 3
    images, anns, dets = [], [], []
    per_class = [[] for _ in range(n_cls)]
    for i in range(n_img):
        images.append({"id": i + 1, "width": 200, "height": 200})
        for c in range(n_cls):
            gt = rand_boxes(int(rng.integers(0, 5)), rng, 2.0)
            hit = rng.random(len(gt)) < 0.8
            dt = gt[hit] + rng.normal(0, 4, (int(hit.sum()), 4))
            dt[:, 2:] = np.maximum(dt[:, 2:], dt[:, :2] + 1)
            dt = np.concatenate([dt, rand_boxes(int(rng.integers(0, 4)), rng, 2.0)])
            sc = rng.random(len(dt))
            per_class[c].append((gt, dt, sc))
            for b in gt:
                anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": c + 1, "iscrowd": 0,
                             "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]], "area": (b[2] - b[0]) * (b[3] - b[1])})
            for b, s in zip(dt, sc):
                dets.append({"image_id": i + 1, "category_id": c + 1, "score": float(s),
                             "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]]})
    with contextlib.redirect_stdout(io.StringIO()):
        gt_api = COCO()
        gt_api.dataset = {"images": images, "annotations": anns,
                          "categories": [{"id": c + 1, "name": str(c)} for c in range(n_cls)]}
        gt_api.createIndex()
        ev = COCOeval(gt_api, gt_api.loadRes(dets), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    mean_ap, table = det.coco_map(per_class)
    assert abs(mean_ap - ev.stats[0]) < 1e-9
    assert abs(np.nanmean(table[:, 0]) - ev.stats[1]) < 1e-9      # AP50
    assert abs(np.nanmean(table[:, 5]) - ev.stats[2]) < 1e-9      # AP75
