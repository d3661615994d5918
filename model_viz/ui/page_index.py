"""The app's pages in navigation order — one table for ``app.py``'s navigation and the home page's links.

Each page has one **slug** used everywhere: its file (``app_pages/<slug>.py``), its modules, its strings
(keys ``<slug>.*``), its widget keys (``<slug>_*``) and its URL (``/<slug>`` with ``-`` for ``_``). The
title and caption keys are written out whole so the i18n test can see that they are used.

Design notes: ``docs/visualizer.md#page-slugs``.
"""

from __future__ import annotations
from typing import NamedTuple


class PageEntry(NamedTuple):
    slug: str
    icon: str
    title_key: str  # the navigation / link title: "<slug>.nav"
    caption_key: str | None = None  # the home page's one-line description; None = not listed on home

    @property
    def file(self) -> str:
        return f"app_pages/{self.slug}.py"

    @property
    def url_path(self) -> str:
        return self.slug.replace("_", "-")


PAGES = (
    PageEntry("home", ":material/home:", "home.nav"),
    PageEntry("hybrid_chain", ":material/account_tree:", "hybrid_chain.nav", "hybrid_chain.caption"),
    PageEntry("three_states", ":material/stacked_bar_chart:", "three_states.nav", "three_states.caption"),
    PageEntry("pool_map", ":material/memory:", "pool_map.nav", "pool_map.caption"),
    PageEntry("kda_segments", ":material/splitscreen:", "kda_segments.nav", "kda_segments.caption"),
    PageEntry("state_evolution", ":material/grid_on:", "state_evolution.nav", "state_evolution.caption"),
    PageEntry("prefix_vs_kv", ":material/compare_arrows:", "prefix_vs_kv.nav", "prefix_vs_kv.caption"),
    PageEntry("checkpoint_tree", ":material/park:", "checkpoint_tree.nav", "checkpoint_tree.caption"),
    PageEntry("restore_paths", ":material/settings_backup_restore:", "restore_paths.nav", "restore_paths.caption"),
    PageEntry("state_blocks", ":material/view_week:", "state_blocks.nav", "state_blocks.caption"),
    PageEntry("checkpoint_density", ":material/tune:", "checkpoint_density.nav", "checkpoint_density.caption"),
    PageEntry("compressed_checkpoints", ":material/compress:", "compressed_checkpoints.nav",
              "compressed_checkpoints.caption"),
    PageEntry("spec_decode", ":material/fast_forward:", "spec_decode.nav", "spec_decode.caption"),
    PageEntry("swa_vs_kda", ":material/view_timeline:", "swa_vs_kda.nav", "swa_vs_kda.caption"),
    PageEntry("context_parallel", ":material/call_split:", "context_parallel.nav", "context_parallel.caption"),
    PageEntry("pd_disaggregation", ":material/swap_horiz:", "pd_disaggregation.nav",
              "pd_disaggregation.caption"),
    PageEntry("lab", ":material/science:", "lab.nav", "lab.caption"),
    PageEntry("live", ":material/monitor_heart:", "live.nav", "live.caption"),
    PageEntry("concept_map", ":material/map:", "concept_map.nav"),
)
