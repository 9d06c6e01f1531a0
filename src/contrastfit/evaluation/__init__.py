"""Evaluation: metrics, statistics, embedding analyses, error analysis and plots."""

from .embedding import alignment, alignment_uniformity_by_label, distance_to_mean_groups, uniformity
from .metrics import HEADLINE, classification_metrics, evaluate_model, headline, regression_metrics
from .statistics import best_by_validation, compare_to_baseline, summarize, top_k

__all__ = [
    "HEADLINE", "classification_metrics", "evaluate_model", "headline", "regression_metrics",
    "alignment", "uniformity", "alignment_uniformity_by_label", "distance_to_mean_groups",
    "summarize", "top_k", "compare_to_baseline", "best_by_validation",
]
