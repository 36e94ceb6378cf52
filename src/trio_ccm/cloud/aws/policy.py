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
    "ec2:DescribeInstanceTopology",
    # load balancers: subnets and security groups
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:CreateSecurityGroup",
    "ec2:CreateTags",
    "ec2:DeleteSecurityGroup",
    "ec2:AuthorizeSecurityGroupIngress",
    "ec2:RevokeSecurityGroupIngress",
    # load balancers: both ELB APIs (Classic and v2 share the IAM prefix)
    "elasticloadbalancing:DescribeLoadBalancers",
    "elasticloadbalancing:DescribeTags",
    "elasticloadbalancing:AddTags",
    "elasticloadbalancing:CreateLoadBalancer",
    "elasticloadbalancing:DeleteLoadBalancer",
    "elasticloadbalancing:DescribeLoadBalancerAttributes",
    "elasticloadbalancing:ModifyLoadBalancerAttributes",
    # Classic ELB
    "elasticloadbalancing:CreateLoadBalancerListeners",
    "elasticloadbalancing:DeleteLoadBalancerListeners",
    "elasticloadbalancing:ApplySecurityGroupsToLoadBalancer",
    "elasticloadbalancing:ConfigureHealthCheck",
    "elasticloadbalancing:AttachLoadBalancerToSubnets",
    "elasticloadbalancing:DetachLoadBalancerFromSubnets",
    "elasticloadbalancing:CreateLoadBalancerPolicy",
    "elasticloadbalancing:SetLoadBalancerPoliciesForBackendServer",
    "elasticloadbalancing:SetLoadBalancerPoliciesOfListener",
    "elasticloadbalancing:SetSecurityGroups",
    "elasticloadbalancing:RegisterInstancesWithLoadBalancer",
    "elasticloadbalancing:DeregisterInstancesFromLoadBalancer",
    # NLB
    "elasticloadbalancing:DescribeListeners",
    "elasticloadbalancing:CreateListener",
    "elasticloadbalancing:ModifyListener",
    "elasticloadbalancing:DeleteListener",
    "elasticloadbalancing:DescribeTargetGroups",
    "elasticloadbalancing:CreateTargetGroup",
    "elasticloadbalancing:ModifyTargetGroup",
    "elasticloadbalancing:ModifyTargetGroupAttributes",
    "elasticloadbalancing:DeleteTargetGroup",
    "elasticloadbalancing:DescribeTargetHealth",
    "elasticloadbalancing:RegisterTargets",
    "elasticloadbalancing:DeregisterTargets",
    # routes
    "ec2:DescribeRouteTables",
    "ec2:CreateRoute",
    "ec2:DeleteRoute",
    "ec2:ModifyInstanceAttribute",
)
"""Every action the provider calls with its credentials (STS's AssumeRole for RoleARN is
granted by the role's trust policy, AssumeRoleWithWebIdentity needs no permission)."""
