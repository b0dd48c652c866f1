# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The argument spec options of a module that acts only under a verified change record (the doc
fragment hybridgpu.fleet.change_record documents them), and of the settings its action plugin
adds from the pinned sources (plugin_utils/pinned.py)."""

from __future__ import annotations


def record_options():
    """The record and the run's targets, as a task gives them; the boundary the plugin sets."""
    return dict(
        record_path=dict(type="path"),
        record_text=dict(type="str"),
        signature=dict(type="str", no_log=False),
        executor=dict(type="str"),
        targets=dict(type="list", elements="str"),
        boundary=dict(type="path"),
    )


def pinned_options():
    """What the action plugin sets from the pinned sources and the task's host; a task may not."""
    return dict(
        boundary_signers=dict(type="str"),
        ledger_dir=dict(type="path"),
        checkpoint_key=dict(type="path", no_log=False),
        awx_user=dict(type="str"),
        task_host=dict(type="str"),
    )
