"""authorization.k8s.io and authentication.k8s.io reviews: created, computed, never stored."""

from __future__ import annotations

from trio_ccm_testbed.apiserver.kinds.base import ReviewType

REVIEW_TYPES = (
    ReviewType(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
    ),
    ReviewType(
        "authorization.k8s.io",
        "v1",
        "SubjectAccessReview",
        "subjectaccessreviews",
        "subjectaccessreview",
    ),
    ReviewType(
        "authorization.k8s.io",
        "v1",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        "selfsubjectrulesreview",
    ),
    ReviewType("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", "tokenreview"),
    *(
        ReviewType(
            "authentication.k8s.io",
            version,
            "SelfSubjectReview",
            "selfsubjectreviews",
            "selfsubjectreview",
        )
        for version in ("v1", "v1beta1", "v1alpha1")  # kubectl 1.27 asks v1alpha1 first
    ),
)
