"""The app's pages in navigation order: file, i18n name, icon, URL path — one table for ``app.py``'s
navigation and the home page's list of links (each listed page has a ``home.page.<name>`` caption)."""

from __future__ import annotations

from typing import NamedTuple


class PageEntry(NamedTuple):
    name: str  # i18n keys nav.<name> (and home.page.<name> when listed on home); file pages/<file>.py
    file: str
    icon: str
    url_path: str  # the concept map's differs from its file name: AppTest loses the sidebar otherwise
    on_home: bool = True


PAGES = (
    PageEntry("home", "home", ":material/home:", "home", on_home=False),
    PageEntry("chain", "hybrid_chain", ":material/account_tree:", "hybrid-chain"),
    PageEntry("three_states", "three_states", ":material/stacked_bar_chart:", "three-states"),
    PageEntry("pool_map", "pool_map", ":material/memory:", "pool-map"),
    PageEntry("segments", "segments", ":material/splitscreen:", "segmentable"),
    PageEntry("state_evolution", "state_evolution", ":material/grid_on:", "state-evolution"),
    PageEntry("prefix_vs_kv", "prefix_vs_kv", ":material/compare_arrows:", "prefix-not-kv"),
    PageEntry("checkpoint_tree", "checkpoint_tree", ":material/park:", "checkpoints"),
    PageEntry("restore_paths", "restore_paths", ":material/settings_backup_restore:", "restore"),
    PageEntry("state_blocks", "state_blocks", ":material/view_week:", "vllm-blocks"),
    PageEntry("density", "density", ":material/tune:", "checkpoint-density"),
    PageEntry("concept_map", "concept_map", ":material/map:", "concepts", on_home=False),
)
