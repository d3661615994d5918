"""UI strings of the page ``app_pages/three_states.py`` (namespace ``three_states.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "three_states.nav": {
        "en": "Three kinds of state",
        "zh": "三种状态",
    },
    "three_states.caption": {
        "en": "MLA KV that grows per token vs the fixed KDA state and conv window, in bytes, for the tiny and the 48B model.",
        "zh": "随 token 增长的 MLA KV 与固定大小的 KDA 状态和卷积窗口，以字节计，分别针对 tiny 模型和 48B 模型。",
    },
    "three_states.title": {
        "en": "Three kinds of state",
        "zh": "三种状态",
    },
    "three_states.intro": {
        "en": (
            "A request of a hybrid KDA + MLA model owns three kinds of cached state:\n\n"
            "- **MLA KV**: one latent row per token per MLA layer. It grows with the sequence, and any "
            "prefix of it is a valid cache for that prefix.\n"
            "- **KDA recurrent state**: per KDA layer, one fp32 K × V matrix per head. Its size does not "
            "depend on the length; it is overwritten every token.\n"
            "- **Conv window**: per KDA layer, the last W − 1 = {w} inputs of the short convolution. Also "
            "fixed, and it must describe the same token boundary as the recurrent state.\n\n"
            "Move the sequence length and compare the bytes of each kind, for the tiny model of this "
            "project and for Kimi-Linear-48B (sizes as served: fp32 state, bf16 conv window and KV). "
            "The dashed line is the break-even length, where the growing KV has caught up with the fixed "
            "state."
        ),
        "zh": (
            "混合 KDA + MLA 模型的一个请求拥有三种缓存状态：\n\n"
            "- **MLA KV**：每个 MLA 层每个 token 一行潜在向量。它随序列增长，而且它的任意前缀都是该前缀的"
            "有效缓存。\n"
            "- **KDA 递推状态**：每个 KDA 层每个头一个 fp32 的 K × V 矩阵。它的大小与长度无关，每个 token "
            "都会被覆盖。\n"
            "- **卷积窗口**：每个 KDA 层保存短卷积最近的 W − 1 = {w} 个输入。它同样是固定大小的，"
            "并且必须与递推状态对应同一个 token 边界。\n\n"
            "拖动序列长度，比较每种状态的字节数：分别针对本项目的 tiny 模型和 Kimi-Linear-48B"
            "（按实际推理时的精度：fp32 状态，bf16 卷积窗口和 KV）。虚线是盈亏平衡长度：在这里，不断增长的 "
            "KV 追上了固定大小的状态。"
        ),
    },
    "three_states.len_label": {
        "en": "sequence length T (tokens)",
        "zh": "序列长度 T（token 数）",
    },
    "three_states.scope_toggle": {
        "en": "whole model per sequence (all KDA layers vs all MLA layers) instead of one layer of each",
        "zh": "按整个模型每个序列计算（所有 KDA 层对所有 MLA 层），而不是每种各一层",
    },
    "three_states.current": {
        "en": ("**T = {T} tokens.** {small}: MLA KV {tiny_kv}, KDA state + conv {tiny_kda} (break-even at "
               "{tiny_be} tokens). {big}: MLA KV {big_kv}, KDA state + conv {big_kda} (break-even at {big_be} tokens)."),
        "zh": ("**T = {T} 个 token。** {small}：MLA KV {tiny_kv}，KDA 状态 + 卷积 {tiny_kda}（盈亏平衡点 {tiny_be} 个 "
               "token）。{big}：MLA KV {big_kv}，KDA 状态 + 卷积 {big_kda}（盈亏平衡点 {big_be} 个 token）。"),
    },
    "three_states.cfg.k3_tiny": {
        "en": "K3 tiny (this project)",
        "zh": "K3 tiny（本项目）",
    },
    "three_states.cfg.k3": {
        "en": "Kimi K3",
        "zh": "Kimi K3",
    },
    "three_states.col.what": {
        "en": "what is held",
        "zh": "保存的内容",
    },
    "three_states.serving.title": {
        "en": "**Serving one request, as served (fp32 state, bf16 conv window and KV)**",
        "zh": "**服务一个请求（按实际推理精度：fp32 状态，bf16 卷积窗口和 KV）**",
    },
    "three_states.serving.recurrent": {
        "en": "KDA recurrent state, one layer",
        "zh": "KDA 递推状态，一层",
    },
    "three_states.serving.conv": {
        "en": "conv window, one layer",
        "zh": "卷积窗口，一层",
    },
    "three_states.serving.kv_token": {
        "en": "MLA KV per token (all MLA layers)",
        "zh": "每个 token 的 MLA KV（所有 MLA 层）",
    },
    "three_states.serving.checkpoint": {
        "en": "one checkpoint (every KDA layer's state and window)",
        "zh": "一个checkpoint（所有 KDA 层的状态和窗口）",
    },
    "three_states.serving.request": {
        "en": "a request at {n} tokens (states + KV)",
        "zh": "一个 {n} token 的请求（状态 + KV）",
    },
    "three_states.serving.note": {
        "en": ("Kimi K3 has 69 KDA layers of 96 heads × 128 × 128 (Kimi-Linear-48B: 20 of 32): one checkpoint is "
               "{ratio:.1f} times larger, so a prefix cache holds that many times fewer of them in the same memory. "
               "Each of its 24 MLA layers caches the same 576-wide latent row per token as each of Kimi-Linear's 7: "
               "a K3 MLA layer's q-LoRA and output gate change its compute, not its cache."),
        "zh": ("Kimi K3 有 69 个 KDA 层，每层 96 个头 × 128 × 128（Kimi-Linear-48B：20 层，32 个头）：一个checkpoint"
               "大 {ratio:.1f} 倍，同样的内存里前缀缓存能保存的checkpoint也就少这么多倍。它的 24 个 MLA 层每层每个 token "
               "缓存的潜在行与 Kimi-Linear 的 7 个 MLA 层一样宽（576）：K3 MLA 层的 q-LoRA 和输出门改变的是计算，"
               "不是缓存。"),
    },
    "three_states.col.kind": {
        "en": "kind",
        "zh": "种类",
    },
    "three_states.cfg.tiny": {
        "en": "tiny (this project)",
        "zh": "tiny（本项目）",
    },
    "three_states.cfg.48b": {
        "en": "Kimi-Linear-48B",
        "zh": "Kimi-Linear-48B",
    },
    "three_states.kind.mla_kv": {
        "en": "MLA KV (grows)",
        "zh": "MLA KV（增长）",
    },
    "three_states.kind.kda_recurrent": {
        "en": "KDA recurrent state",
        "zh": "KDA 递推状态",
    },
    "three_states.kind.conv": {
        "en": "conv window",
        "zh": "卷积窗口",
    },
    "three_states.kind.kda_total": {
        "en": "KDA state + conv",
        "zh": "KDA 状态 + 卷积",
    },
    "three_states.fig.title.layer": {
        "en": "Bytes per sequence for ONE KDA layer and ONE MLA layer; T = {T}",
        "zh": "一个 KDA 层与一个 MLA 层每个序列的字节数；T = {T}",
    },
    "three_states.fig.title.model": {
        "en": "Bytes per sequence for the whole model (all KDA layers, all MLA layers); T = {T}",
        "zh": "整个模型每个序列的字节数（所有 KDA 层、所有 MLA 层）；T = {T}",
    },
    "three_states.fig.x": {
        "en": "sequence length T (tokens)",
        "zh": "序列长度 T（token 数）",
    },
    "three_states.fig.y": {
        "en": "{unit}",
        "zh": "{unit}",
    },
    "three_states.fig.current": {
        "en": "at T",
        "zh": "当前 T",
    },
    "three_states.fig.break_even": {
        "en": " break-even ≈ {n} tokens",
        "zh": " 盈亏平衡 ≈ {n} 个 token",
    },
    "three_states.fig.window.title": {
        "en": "After T = {T} tokens: what each kind holds (tiny, W = {W})",
        "zh": "T = {T} 个 token 之后：每种状态保存了什么（tiny，W = {W}）",
    },
    "three_states.fig.window.x": {
        "en": "token position",
        "zh": "token 位置",
    },
    "three_states.fig.window.state": {
        "en": "one fixed {H} × {K} × {V} matrix set: a summary of all {T} tokens",
        "zh": "一组固定的 {H} × {K} × {V} 矩阵：对全部 {T} 个 token 的概括",
    },
    "three_states.table.title": {
        "en": "Bytes at T, per sequence",
        "zh": "T 时每个序列的字节数",
    },
    "three_states.watch": {
        "en": (
            "- **Short sequences favour MLA, long ones KDA.** Below the break-even length one KDA "
            "layer's state is the larger cache; above it, the MLA layer's KV is, and it keeps growing. "
            "For Kimi-Linear-48B one KDA layer's state (2 MiB + 72 KiB conv) equals one MLA layer's KV at "
            "about 1,900 tokens.\n"
            "- **The state is fixed but not small.** Per sequence the 48B model holds 20 KDA states, "
            "about 41 MiB, before the first token — a pool must budget that per running request.\n"
            "- **Different shapes, different pages.** KV grows by whole pages per `page_size` tokens, "
            "the state is one indivisible unit. That is why a hybrid pool has page kinds (see the memory "
            "pool page).\n"
            "- **Only the KV can be cut.** Any prefix of the KV is a cache for that prefix; the state "
            "(and conv window) exist only for the current boundary."
        ),
        "zh": (
            "- **短序列 MLA 占优，长序列 KDA 占优。** 在盈亏平衡长度以下，一个 KDA 层的状态是更大的缓存；"
            "超过它之后，MLA 层的 KV 更大，而且还在继续增长。对 Kimi-Linear-48B，一个 KDA 层的状态"
            "（2 MiB + 72 KiB 卷积）约等于一个 MLA 层 1900 个 token 的 KV。\n"
            "- **状态固定但并不小。** 48B 模型每个序列在第一个 token 之前就持有 20 个 KDA 状态，约 41 MiB——"
            "内存池必须为每个正在运行的请求预留这部分。\n"
            "- **形状不同，页也不同。** KV 每 `page_size` 个 token 增长一整页，状态则是一个不可分割的单元。"
            "这就是混合内存池要区分页面种类的原因（见内存池页面）。\n"
            "- **只有 KV 可以截断。** KV 的任意前缀都是该前缀的缓存；状态（以及卷积窗口）只存在于当前边界。"
        ),
    },
}
