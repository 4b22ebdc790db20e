// The Python module mmsgg_eval._ext: the kernels of the other files of csrc/ (declared in common.h) and NO_HIT.
#include "common.h"

using namespace mmsgg_ext;

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "mmsgg_eval compiled CPU kernels over per-image predicate score matrices";
  m.attr("NO_HIT") = kNoHit;  // checked against mmsgg_eval.functional.limits.NO_HIT when the module loads
  m.def("row_maxima_checked", &row_maxima_checked, "row maxima [B, width] and the integer range check [B]",
        py::arg("matrices"), py::arg("column"), py::arg("num_predicates"), py::arg("width"));
  m.def("gather_rows", &gather_rows, "predicate columns of rows (image[i], pos[i]) -> [n, P]", py::arg("matrices"),
        py::arg("image"), py::arg("pos"), py::arg("column"), py::arg("num_predicates"));
  m.def("no_graph_constraint_list", &no_graph_constraint_list,
        "stable top-k (pair, predicate) entries pair_score * prob of each image", py::arg("matrices"),
        py::arg("column"), py::arg("num_predicates"), py::arg("best"), py::arg("pair_score"), py::arg("ng_topk"),
        py::arg("top_pairs") = py::none());
  m.def("stable_topk_prefix", &stable_topk_prefix,
        "stable descending top-k of the first count[b] entries of each row: (index [B, k'], valid [B, k'])",
        py::arg("values"), py::arg("count"), py::arg("k"));
  m.def("pad_zero_rows", &pad_zero_rows, "[B, width, ...] zero-padded from tensors [L_b, ...]",
        py::arg("tensors"), py::arg("width"));
  // rel_pairs (every kernel below): B per-image int64 [R_b, 2] tensors, or one padded [B, W, 2] tensor (in a list or
  // alone: the second definition of each name takes a single tensor)
  const char* gc_doc = "the graph-constrained list of a batch: (index [B, k'], valid [B, k'], triplet score [B, W], "
                       "pair score [B, W])";
  m.def("graph_constrained_pairs", &graph_constrained_pairs, gc_doc, py::arg("rel_pairs"), py::arg("object_scores"),
        py::arg("best"), py::arg("count"), py::arg("k"));
  m.def(
      "graph_constrained_pairs",
      [](const at::Tensor& rel_pairs, const at::Tensor& object_scores, const at::Tensor& best, const at::Tensor& count,
         int64_t k) { return graph_constrained_pairs({rel_pairs}, object_scores, best, count, k); },
      gc_doc, py::arg("rel_pairs"), py::arg("object_scores"), py::arg("best"), py::arg("count"), py::arg("k"));
  m.def("ranked_relation_lists", &ranked_relation_lists,
        "row maxima, value check, graph-constrained and no-graph-constraint lists of a pool, one pass per image",
        py::arg("matrices"), py::arg("column"), py::arg("num_predicates"), py::arg("rel_pairs"),
        py::arg("object_scores"), py::arg("count"), py::arg("k"), py::arg("ng_topk"), py::arg("out") = py::none(),
        py::arg("pair_codes") = false, py::arg("oi_length") = -1, py::arg("oi_per_pair") = 0,
        py::arg("oi_min_score") = 0.0,
        py::call_guard<py::gil_scoped_release>());  // reads tensors only: a Python thread may run beside it
  py::class_<RankedPass, std::shared_ptr<RankedPass>>(m, "RankedPass",
                         "ranked_relation_lists shared by threads: work() from each, then finish() for its outputs")
      .def(py::init<const std::vector<at::Tensor>&, int64_t, int64_t, const std::vector<at::Tensor>&,
                    const at::Tensor&, const at::Tensor&, int64_t, int64_t, const std::optional<at::Tensor>&, bool,
                    int64_t, int64_t, double>(),
           py::arg("matrices"), py::arg("column"), py::arg("num_predicates"), py::arg("rel_pairs"),
           py::arg("object_scores"), py::arg("count"), py::arg("k"), py::arg("ng_topk"), py::arg("out") = py::none(),
           py::arg("pair_codes") = false, py::arg("oi_length") = -1, py::arg("oi_per_pair") = 0,
           py::arg("oi_min_score") = 0.0)
      .def("work", &RankedPass::work, "read images not taken yet until none is left (from any thread)",
           py::call_guard<py::gil_scoped_release>())
      .def("start", &RankedPass::start,
           "work() on `tasks` threads of the process' own, once the previous pass has no image left",
           py::arg("tasks"), py::call_guard<py::gil_scoped_release>())
      .def("finished", &RankedPass::finished, "whether every image has been read")
      .def("finish", &RankedPass::finish, "wait for the images being read; the outputs of ranked_relation_lists",
           py::call_guard<py::gil_scoped_release>());
  m.def("wait_beside_idle", &wait_beside_idle,
        "wait until no pass started by RankedPass.start is queued or running (their input references released)",
        py::call_guard<py::gil_scoped_release>());
  m.def("oi_ranked_lists", &oi_ranked_lists,
        "the Open Images list of each image: (score, predicate, pair, subject, object [B, E], valid [B, E])",
        py::arg("matrices"), py::arg("column"), py::arg("num_predicates"), py::arg("rel_pairs"),
        py::arg("object_scores"), py::arg("best"), py::arg("count"), py::arg("length"), py::arg("per_pair"),
        py::arg("min_score"), py::arg("pair_score") = py::none());
  m.def("oi_match_lists", &oi_match_lists,
        "recall first hits [B, G] and AP true positives (rel, phr) [B, E] of Open Images lists",
        py::arg("pred_boxes"), py::arg("pred_labels"), py::arg("gt_boxes"), py::arg("gt_labels"), py::arg("gt_pairs"),
        py::arg("gt_predicates"), py::arg("gt_valid"), py::arg("subject"), py::arg("object"), py::arg("predicate"),
        py::arg("valid"), py::arg("plus_one"), py::arg("recall_thr"), py::arg("ap_thr"));
  m.def("box_relation_end_bits", &box_relation_end_bits,
        "bit sets [B, N, W] of the GT relations whose subject / object each predicted object matches (box IoU)",
        py::arg("pred_boxes"), py::arg("pred_labels"), py::arg("gt_boxes"), py::arg("gt_labels"), py::arg("gt_pairs"),
        py::arg("gt_valid"), py::arg("iou_thr"), py::arg("plus_one"));
  m.def("box_overlap_flags", &box_overlap_flags,
        "(located [B, M], detected [B, M], located subject / object bits [B, N, W]) of the error analysis: which "
        "GT objects some predicted object overlaps (box IoU, any class) / matches, and the GT relations whose ends "
        "each predicted object overlaps",
        py::arg("pred_boxes"), py::arg("pred_labels"), py::arg("gt_boxes"), py::arg("gt_labels"), py::arg("gt_pairs"),
        py::arg("gt_valid"), py::arg("iou_thr"), py::arg("plus_one"));
  m.def("image_diagnostics", &image_diagnostics,
        "(box-frame flags [B] uint8, label offset counts [B, 4] int32) of the input diagnostics, image by image",
        py::arg("pred_boxes"), py::arg("pred_labels"), py::arg("gt_boxes"), py::arg("gt_labels"), py::arg("original"),
        py::arg("resized"), py::arg("label_images"), py::arg("label_iou"), py::arg("plus_one"),
        py::arg("tolerance_px"), py::arg("tolerance_rel"), py::arg("downscale_limit"), py::arg("unit_min_side"),
        py::arg("flag_bits"));
  const char* hits_doc = "first-hit rank [B, G] int32 of every GT relation in a ranked list";
  m.def("first_hit_ranks", &first_hit_ranks, hits_doc, py::arg("subject_bits"), py::arg("object_bits"),
        py::arg("gt_predicates"), py::arg("gt_valid"), py::arg("rel_pairs"), py::arg("index"), py::arg("valid"),
        py::arg("predicate"), py::arg("list_valid"), py::arg("matrices"), py::arg("start"), py::arg("column"),
        py::arg("num_predicates"), py::arg("ends_only"));
  m.def(
      "first_hit_ranks",
      [](const at::Tensor& subject_bits, const at::Tensor& object_bits, const at::Tensor& gt_predicates,
         const at::Tensor& gt_valid, const at::Tensor& rel_pairs, const at::Tensor& index, const at::Tensor& valid,
         const std::optional<at::Tensor>& predicate, const std::optional<at::Tensor>& list_valid,
         const std::vector<at::Tensor>& matrices, const std::optional<at::Tensor>& start, int64_t column,
         int64_t num_predicates, bool ends_only) {
        return first_hit_ranks(subject_bits, object_bits, gt_predicates, gt_valid, {rel_pairs}, index, valid, predicate,
                               list_valid, matrices, start, column, num_predicates, ends_only);
      },
      hits_doc, py::arg("subject_bits"), py::arg("object_bits"), py::arg("gt_predicates"), py::arg("gt_valid"),
      py::arg("rel_pairs"), py::arg("index"), py::arg("valid"), py::arg("predicate"), py::arg("list_valid"),
      py::arg("matrices"), py::arg("start"), py::arg("column"), py::arg("num_predicates"), py::arg("ends_only"));
  m.def("relation_pair_flags", &relation_pair_flags,
        "(scored, listed) [B, G] bool: some pair joins matching ends of each GT relation / with its predicate",
        py::arg("subject_bits"), py::arg("object_bits"), py::arg("gt_predicates"), py::arg("gt_valid"),
        py::arg("rel_pairs"), py::arg("count"), py::arg("matrices"), py::arg("start"), py::arg("column"),
        py::arg("num_predicates"), py::arg("pair_codes") = py::none());
  const char* gt_doc = "stable top-k of values over each image's real pairs that are GT pairs: (index [B, k'], "
                       "valid [B, k'])";
  m.def("gt_pair_list", &gt_pair_list, gt_doc, py::arg("rel_pairs"), py::arg("count"), py::arg("gt_pairs"),
        py::arg("gt_valid"), py::arg("values"), py::arg("k"));
  m.def(
      "gt_pair_list",
      [](const at::Tensor& rel_pairs, const at::Tensor& count, const at::Tensor& gt_pairs, const at::Tensor& gt_valid,
         const at::Tensor& values, int64_t k) { return gt_pair_list({rel_pairs}, count, gt_pairs, gt_valid, values, k); },
      gt_doc, py::arg("rel_pairs"), py::arg("count"), py::arg("gt_pairs"), py::arg("gt_valid"), py::arg("values"),
      py::arg("k"));
  m.def("pad_int64_rows", &pad_int64_rows,
        "(padded [B, W, ...] or None without pad, min [B], max [B] or None without ranges, lengths [B]) of int64 "
        "CPU tensors (strided = true: also strided ones of rank 1 or 2), or None for other tensors",
        py::arg("tensors"), py::arg("value"), py::arg("pad") = true, py::arg("ranges") = true,
        py::arg("strided") = false);
  m.def("lengths_mask", &lengths_mask, "[B, width] bool: true on the first lengths[b] entries of each row",
        py::arg("lengths"), py::arg("width"));
  m.def("hit_counts", &hit_counts,
        "[L, size] int64: per limit the relations of each key (in [0, size)) whose rank is below it",
        py::arg("key"), py::arg("rank"), py::arg("limits"), py::arg("size"));
  m.def("predicate_quotient_sums", &predicate_quotient_sums,
        "(sums [L, P] float64, images [P] int64): per (rank column, limit) the per-predicate sums over images of "
        "hits / relations of each (image, predicate) cell (torch's sum(0) of that table), and the images per predicate",
        py::arg("key"), py::arg("ranks"), py::arg("limits"), py::arg("num_images"), py::arg("num_predicates"));
  m.def("matrices_suit", &matrices_suit, "whether every matrix is a contiguous float32 CPU tensor of few entries",
        py::arg("matrices"), py::arg("num_predicates"), py::arg("max_entries"));
  m.def("box_match_overlap_flags", &box_match_overlap_flags,
        "(subject / object bits, located subject / object bits [B, N, W], pre-pair cause code [B, G] int8, valid GT "
        "objects, overlapped, matched [B] int32): box_relation_end_bits and the error analysis' overlaps in one pass",
        py::arg("pred_boxes"), py::arg("pred_labels"), py::arg("gt_boxes"), py::arg("gt_labels"), py::arg("gt_pairs"),
        py::arg("gt_valid"), py::arg("iou_thr"), py::arg("plus_one"), py::arg("cause_codes"));
  m.def("stage_first_hit_ranks", &stage_first_hit_ranks,
        "[3, B, G] int32 stage-wise first-hit ranks (pair_loc, pair_det, pred_cls) in a list of (subject, object) ends",
        py::arg("subject_bits"), py::arg("object_bits"), py::arg("located_subject_bits"),
        py::arg("located_object_bits"), py::arg("gt_predicates"), py::arg("gt_valid"), py::arg("ends"),
        py::arg("valid"), py::arg("predicate"), py::arg("num_predicates"));
  m.def("pad_float_rows_checked", &pad_float_rows_checked,
        "(zero-padded [B, W, ...] float32, bad [B] bool: an entry breaks the value rule of kind 0 scores / 1 xyxy "
        "boxes, lengths [B]) of contiguous float32 CPU tensors, or None for other tensors",
        py::arg("tensors"), py::arg("kind"));
  m.def("coco_match_images", &coco_match_images,
        "(order [B, D], kept [B, D], matched [B, D, T], ignored [B, D, T], gt_counts [B, C]): COCO's per-image "
        "matching of a padded batch (evaluation order, max_dets per class, greedy matching at thresholds > 0)",
        py::arg("det_boxes"), py::arg("det_scores"), py::arg("det_labels"), py::arg("det_valid"), py::arg("gt_boxes"),
        py::arg("gt_labels"), py::arg("gt_valid"), py::arg("gt_unmatchable"), py::arg("thresholds"),
        py::arg("num_classes"), py::arg("max_dets"), py::arg("plus_one"), py::arg("float32_det_sizes"),
        py::arg("area_lo"), py::arg("area_hi"));
  m.def("coco_precision_table", &coco_precision_table,
        "[T, R, C] float64 interpolated precision of COCOeval.accumulate from the kept detections in class order",
        py::arg("matched"), py::arg("ignored"), py::arg("bounds"), py::arg("gt_counts"), py::arg("recall_thresholds"));
  m.def("matrix_shapes", &matrix_shapes,
        "(rows, columns, all contiguous float32, all on the first one's device) of 2-D tensors, or None when one "
        "is not 2-D",
        py::arg("tensors"));
}
