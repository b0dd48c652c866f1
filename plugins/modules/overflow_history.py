#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: overflow_history
short_description: Size the warm cloud pool from a job history (Slurm sacct export or Kubernetes Jobs)
version_added: "0.1.0"
description:
  - Reads the finished GPU jobs of a Slurm C(sacct --parsable2) export, or the Jobs of a Kubernetes
    cluster (all namespaces or one), and replays each job through the overflow time model with the
    settings of its class from the job classes file (the same file M(hybridgpu.fleet.overflow_decide) reads).
  - Returns the recommended warm pool (GPUs and nodes) per hour of day, the expected queue wait (p50, p95)
    with and without overflow, which classes belong in the overflow rule, and the cost per completed job
    by billing mode (per-minute pay-as-you-go, and prepaid when the prices commit prepaid GPU hours).
  - "Slurm: the export needs the fields JobID (or JobIDRaw), State, Submit, Start, End, Partition and
    AllocTRES (or ReqTRES), plus QOS and Account when a class matches on them, for example
    C(sacct --allusers --parsable2 --starttime now-7days --format=JobID,State,Submit,Start,End,Partition,QOS,Account,AllocTRES).
    Step rows (C(123.batch)) are left out. A job's class is the class whose C(slurm) match equals its partition,
    QOS and account. Times without a zone are read as UTC, so the hours of day are those of the export's clock."
  - "Kubernetes: the queue wait runs from the Job's creation to C(status.startTime) (with a queue that keeps
    Jobs suspended until admitted, such as Kueue, that is the admission), the run to C(status.completionTime)
    or the Failed condition. A Job's class is its C(hybridgpu.io/job-class) label; GPUs are its containers'
    C(nvidia.com/gpu) limits (else requests) times its parallelism."
  - Jobs that never started, are still running or asked for no GPU are counted in RV(jobs_skipped) and left out.
    Jobs of no class count in the waits and never move.
  - The module only reads, except that with O(record_path) it writes the record (JSON and an HTML page
    beside it); in check mode it writes nothing and says whether it would, and with C(--diff) it shows the
    JSON record before and after. A record that differs only in its C(written_at) time is not rewritten.
extends_documentation_fragment:
  - hybridgpu.fleet.attributes
  - hybridgpu.fleet.k8s_auth
attributes:
  check_mode:
    support: full
    details: Reads and computes the same; the record is not written, C(changed) says whether it would be.
  diff_mode:
    support: full
    details: Before and after of the JSON record at O(record_path).
options:
  source:
    description:
      - Where the job history comes from. V(sacct) reads O(path); V(kubernetes) lists Jobs through the
        Kubernetes API with the connection options.
    type: str
    required: true
    choices: [sacct, kubernetes]
  path:
    description:
      - The C(sacct --parsable2) export (header line first) on the host running the module. Required with
        O(source=sacct).
    type: path
  namespace:
    description:
      - With O(source=kubernetes), only Jobs of this namespace. Unset, every namespace.
    type: str
  label_selector:
    description:
      - With O(source=kubernetes), only Jobs matching this label selector.
    type: str
  job_classes:
    description:
      - The job classes YAML file (validated; errors name the file and field). Its optional C(cost.prices)
        block prices the cost rows.
    type: path
    required: true
  prices:
    description:
      - Prices that replace the job classes file's C(cost.prices) (keys C(gpu_hour), C(warm_pool_gpu_hour),
        C(storage_gb_month), C(ingress_per_gb), C(egress_per_gb), C(engineer_hour), C(prepaid_gpu_hours),
        C(prepaid_gpu_hour)). C(prepaid_gpu_hours) counts the GPU hours prepaid for the span of the history.
        With no prices at all, RV(cost) is empty.
    type: dict
  window:
    description:
      - Averaging window of the waiting GPU demand, in seconds or with a unit (V(15min)).
    type: str
    default: 15min
  pool_percentile:
    description:
      - Percentile of an hour's windows that sizes the pool for that hour.
    type: float
    default: 95.0
  node_gpus:
    description:
      - GPUs per cloud node; the pool is rounded up to whole nodes.
    type: int
    default: 8
  min_share:
    description:
      - Least share (0 to 1) of a class's jobs that must finish sooner in the cloud for the class to be recommended.
    type: float
    default: 0.2
  record_path:
    description:
      - Write the record here (a path ending in C(.json)) and the HTML page beside it (same name, C(.html)).
        Unset, nothing is written.
    type: path
author:
  - hybridgpu.fleet maintainers (@hybridgpu)
"""

EXAMPLES = r"""
- name: Size the pool from last week's Slurm accounting
  hybridgpu.fleet.overflow_history:
    source: sacct
    path: /var/tmp/sacct-week.txt
    job_classes: "{{ inventory_dir }}/overflow/job_classes.yml"
    record_path: "{{ hgpu_records_dir | hybridgpu.fleet.records_dir('overflow-history', 'week.json') }}"
  register: overflow_history

- name: The same from the Jobs of one namespace of the on-prem cluster
  hybridgpu.fleet.overflow_history:
    source: kubernetes
    context: onprem
    namespace: research
    job_classes: "{{ inventory_dir }}/overflow/job_classes.yml"
    prices: {gpu_hour: 2.5, storage_gb_month: 0.02, egress_per_gb: 0.05}
"""

RETURN = r"""
jobs:
  description: Finished GPU jobs analysed.
  returned: always
  type: int
jobs_completed:
  description: Of those, the jobs that completed (Slurm state COMPLETED, Kubernetes condition Complete).
  returned: always
  type: int
jobs_skipped:
  description: Jobs left out, by reason (C(not_started), C(running), C(no_gpu)).
  returned: always
  type: dict
span:
  description: First submit and last end (epoch seconds) and the days they cover.
  returned: always
  type: dict
classes:
  description: Per class, jobs, wait (C(p50_s), C(p95_s), C(mean_s), C(max_s)), C(share_moved), C(median_gain_s),
    C(recommend_overflow) and C(why).
  returned: always
  type: dict
overflow_classes:
  description: The classes recommended for the overflow rule.
  returned: always
  type: list
  elements: str
pool_by_hour:
  description: The recommended warm pool for each hour of day 0 to 23.
  returned: always
  type: list
  elements: dict
  contains:
    hour:
      description: Hour of day.
      type: int
    gpus:
      description: Recommended warm pool GPUs (whole nodes).
      type: int
    nodes:
      description: The same in nodes of O(node_gpus).
      type: int
    percentile_waiting_gpus:
      description: The O(pool_percentile) of that hour's window averages.
      type: float
    peak_window_gpus:
      description: The busiest window of that hour.
      type: float
    windows:
      description: How many windows of the history fell in that hour.
      type: int
pool_peak_hour_gpus:
  description: The largest hourly pool.
  returned: always
  type: int
wait:
  description: Queue wait of every analysed job without and with overflow (C(p50_s), C(p95_s), C(mean_s), C(max_s))
    and C(jobs_moved).
  returned: always
  type: dict
cost:
  description: One row per billing mode (C(billing) per_minute or prepaid) with every cost line, C(total),
    C(jobs_completed_returned) and C(cost_per_completed_job); empty without prices.
  returned: always
  type: list
  elements: dict
rules:
  description: The rules the numbers follow, in words.
  returned: always
  type: dict
record:
  description: The JSON and HTML files of the record.
  returned: when O(record_path) is set
  type: dict
  sample: {json: /srv/records/overflow-history/20261201T104500Z.json, html: /srv/records/overflow-history/20261201T104500Z.html}
"""

import time

from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s import K8sError
from ansible_collections.hybridgpu.fleet.plugins.module_utils.common.k8s_module import K8sModule
from ansible_collections.hybridgpu.fleet.plugins.module_utils.overflow import (
    cost, history, history_page, history_report, history_sources, jobclass, timemodel)


def read_history(module, classes):
    params = module.params
    if params["source"] == "sacct":
        return history_sources.read_sacct(params["path"], classes)
    try:
        items = module.client().list_jobs(namespace=params["namespace"], label_selector=params["label_selector"])
    except K8sError as err:
        module.fail_api(err, "Cannot list", "Jobs", namespace=params["namespace"])
    return history_sources.read_k8s_jobs(items, classes)


def bad_prices(prices):
    """Messages for prices that are not numbers of at least 0 (names are checked by cost.scenario_row)."""
    return ["prices.%s: must be a number of at least 0, not %r" % (key, value) for key, value in sorted(prices.items())
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0]


def main():
    module = K8sModule(argument_spec=dict(
        source=dict(type="str", required=True, choices=["sacct", "kubernetes"]),
        path=dict(type="path"),
        namespace=dict(type="str"),
        label_selector=dict(type="str"),
        job_classes=dict(type="path", required=True),
        prices=dict(type="dict"),
        window=dict(type="str", default="15min"),
        pool_percentile=dict(type="float", default=95.0),
        node_gpus=dict(type="int", default=8),
        min_share=dict(type="float", default=0.2),
        record_path=dict(type="path"),
    ), required_if=[("source", "sacct", ["path"])], supports_check_mode=True)
    params = module.params
    if params["record_path"] and not params["record_path"].endswith(".json"):
        module.fail_json(msg="record_path: must end in .json (the HTML page is written beside it), got %s"
                         % params["record_path"])
    if not 0 < params["pool_percentile"] <= 100 or not 0 <= params["min_share"] <= 1 or params["node_gpus"] < 1:
        module.fail_json(msg="pool_percentile must be in (0, 100], min_share in [0, 1] and node_gpus at least 1")
    try:
        window = timemodel.parse_duration(params["window"])
        if window <= 0:
            raise timemodel.UnitError("window must be above zero")
    except timemodel.UnitError as exc:
        module.fail_json(msg="window: %s" % exc)
    try:
        classes = jobclass.load(params["job_classes"])
        prices = params["prices"] if params["prices"] is not None else jobclass.load_cost(params["job_classes"])["prices"]
    except jobclass.JobClassError as exc:
        module.fail_json(msg="invalid job classes: %s" % exc, errors=exc.errors)
    if bad_prices(prices):
        module.fail_json(msg="; ".join(bad_prices(prices)))
    try:
        records, skipped = read_history(module, classes)
        report = history_report.build(records, classes, prices=prices, window_s=window,
                                      pool_percentile=params["pool_percentile"], node_gpus=params["node_gpus"],
                                      min_share=params["min_share"])
    except history.HistoryError as exc:
        module.fail_json(msg=str(exc))
    except cost.CostError as exc:
        module.fail_json(msg="prices: %s" % exc)
    result = dict(report, jobs_skipped=skipped, changed=False)
    if params["record_path"]:
        run = {"source": params["source"], "path": params["path"] if params["source"] == "sacct" else None,
               "namespace": params["namespace"], "context": params["context"],
               "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        record = {"schema_version": 1, "kind": "overflow-history", "run": run, "report": report, "jobs_skipped": skipped}
        changed, before, after = history_page.plan(params["record_path"], record)
        if changed and not module.check_mode:
            try:
                history_page.write(params["record_path"], record)
            except OSError as exc:
                module.fail_json(msg="record_path: cannot write %s: %s" % (params["record_path"], exc))
        result.update(changed=changed, record={"json": params["record_path"],
                                               "html": history_page.html_path(params["record_path"])})
        if module._diff and changed:
            result["diff"] = {"before": before, "after": after, "before_header": params["record_path"],
                              "after_header": params["record_path"]}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
