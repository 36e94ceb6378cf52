"""The IAM actions the aws provider calls: the least-privilege policy (docs/aws.md).

tests/aws/test_auth.py runs the provider in moto's auth mode with exactly these allowed,
and checks docs/aws.md lists each; add an action here when the provider starts calling it.
"""

from __future__ import annotations

from typing import Final

__all__ = ["IAM_ACTIONS"]

IAM_ACTIONS: Final = (
    # instances
    "ec2:DescribeInstances",
    "ec2:DescribeAvailabilityZones",
    # routes
    "ec2:DescribeRouteTables",
    "ec2:CreateRoute",
    "ec2:DeleteRoute",
    "ec2:ModifyInstanceAttribute",
)
"""Every action the provider calls with its credentials (STS's AssumeRole for RoleARN is
granted by the role's trust policy, AssumeRoleWithWebIdentity needs no permission)."""
