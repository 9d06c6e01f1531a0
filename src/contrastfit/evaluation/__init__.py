"""Evaluation: metrics now; statistics, embedding analyses and plots build on it."""

from .metrics import HEADLINE, classification_metrics, evaluate_model, headline, regression_metrics

__all__ = ["HEADLINE", "classification_metrics", "evaluate_model", "headline", "regression_metrics"]
