"""UI strings of the page ``app_pages/compressed_checkpoints.py`` (namespace ``compressed_checkpoints.``), English
and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "compressed_checkpoints.nav": {
        "en": "Compressed checkpoints",
        "zh": "压缩 checkpoint",
    },
    "compressed_checkpoints.caption": {
        "en": "The same checkpoint in fp32, bf16 and int8: bytes, the restore error per layer, and how far the "
              "answer drifts after N decode steps.",
        "zh": "同一个 checkpoint 分别以 fp32、bf16 和 int8 保存：字节数、每层的恢复误差，以及 N 步 decode 之后答案"
              "漂移了多少。",
    },
    "compressed_checkpoints.title": {
        "en": "Compressed checkpoints",
        "zh": "压缩 checkpoint",
    },
    "compressed_checkpoints.intro": {
        "en": "A cached KDA state is idle until a hit, so it can be stored smaller than the fp32 state the kernels "
              "update: bf16, or int8 with one scale per head and key channel (scale = max |S| over the value "
              "dimension / 127), as SGLang's opt-in checkpoint pool does. The conv windows stay in their own "
              "dtype. A hit dequantizes the checkpoint into a fresh fp32 active slot.\n\n"
              "Here the engine serves request A (a {S}-token system prompt and a question), then request B (the "
              "same system prompt, another question). B restores A's checkpoint at token {S}, once per checkpoint "
              "dtype, then decodes greedily. Every number is measured: the state the engine's restore writes "
              "into a fresh active slot against the state it saved at token {S}, and B's logits and tokens "
              "against the same request without prefix cache (its whole prompt prefilled in one forward).",
        "zh": "缓存的 KDA 状态在命中之前一直闲置，所以可以比 kernel 更新的 fp32 状态存得更小：bf16，或者每个 head、每个 "
              "key 通道一个 scale 的 int8（scale = S 在 value 维上的最大绝对值 / 127），SGLang 可选的 checkpoint 池正是"
              "这样做的。卷积窗口保持原来的数据类型。命中时把 checkpoint 反量化到一个新的 fp32 活动槽位。\n\n"
              "这里引擎先处理请求 A（{S} 个 token 的系统提示词加一个问题），再处理请求 B（同样的系统提示词，另一个问题）。"
              "B 在每种 checkpoint 数据类型下各运行一次，从 A 在第 {S} 个 token 处的 checkpoint 恢复，然后贪心 decode。"
              "所有数字都是实测：引擎的恢复写入新活动槽位的状态与它在第 {S} 个 token 处保存的状态比较，B 的 logits 和 "
              "token 与不使用前缀缓存的同一请求（整个提示词在一次前向中 prefill）比较。",
    },
    "compressed_checkpoints.model_label": {
        "en": "model",
        "zh": "模型",
    },
    "compressed_checkpoints.model.trained": {
        "en": "trained tiny model",
        "zh": "训练过的小模型",
    },
    "compressed_checkpoints.model.random": {
        "en": "random weights",
        "zh": "随机权重",
    },
    "compressed_checkpoints.steps_label": {
        "en": "decode steps N",
        "zh": "decode 步数 N",
    },
    "compressed_checkpoints.col.dtype": {"en": "checkpoint dtype", "zh": "checkpoint 数据类型"},
    "compressed_checkpoints.col.bytes": {"en": "bytes / checkpoint (this model)", "zh": "每个 checkpoint 字节数（本模型）"},
    "compressed_checkpoints.col.bytes48": {"en": "Kimi-Linear-48B MiB", "zh": "Kimi-Linear-48B MiB"},
    "compressed_checkpoints.col.layer_err": {"en": "worst layer restore error (restored vs saved)",
                                              "zh": "最差层恢复误差（恢复的与保存的相比）"},
    "compressed_checkpoints.col.drift": {"en": "max |Δlogit| vs no cache", "zh": "与无缓存相比的最大 |Δlogit|"},
    "compressed_checkpoints.col.first": {"en": "first different token", "zh": "第一个不同的 token"},
    "compressed_checkpoints.col.agree": {"en": "tokens equal", "zh": "相同 token 比例"},
    "compressed_checkpoints.never": {
        "en": "none",
        "zh": "无",
    },
    "compressed_checkpoints.no_cache": {
        "en": "ref",
        "zh": "参考",
    },
    "compressed_checkpoints.tokens_title": {
        "en": "B's answer: without cache (ref), then restored from each checkpoint dtype",
        "zh": "B 的回答：不使用缓存（参考），以及从每种数据类型的 checkpoint 恢复后的结果",
    },
    "compressed_checkpoints.fig.layer_title": {
        "en": "restore error per KDA layer",
        "zh": "每个 KDA 层的恢复误差",
    },
    "compressed_checkpoints.fig.drift_title": {
        "en": "logit drift of B's tokens",
        "zh": "B 的 token 的 logit 漂移",
    },
    "compressed_checkpoints.fig.layer_y": {
        "en": "|S_restored − S_saved| / |S_saved|",
        "zh": "|S_恢复 − S_保存| / |S_保存|",
    },
    "compressed_checkpoints.fig.layer_x": {
        "en": "KDA layer",
        "zh": "KDA 层",
    },
    "compressed_checkpoints.fig.drift_y": {
        "en": "max |Δlogit|",
        "zh": "最大 |Δlogit|",
    },
    "compressed_checkpoints.fig.drift_x": {
        "en": "generated token",
        "zh": "生成的 token",
    },
    "compressed_checkpoints.fig.diverged": {
        "en": "{dtype}: first different token",
        "zh": "{dtype}：第一个不同的 token",
    },
    "compressed_checkpoints.watch": {
        "en": "- **fp32 is exact.** A restore copies the saved state bit for bit (restore error 0) and B's "
              "tokens equal the cache-less run's: the default, and what every equivalence test relies on. "
              "Its |Δlogit| need not be 0 (about 1e-5 with the trained model): that is not the checkpoint but "
              "B's prompt computed in two pieces instead of one forward, which fp32 rounds differently in the "
              "last bits (the note under the table measures the same effect without any cache).\n"
              "- **bf16 halves the state, int8 quarters it** (plus the conv windows and, for int8, one fp32 scale "
              "per head and key channel). At Kimi-Linear-48B's size that is 41.4 → 21.4 → 11.7 MiB per "
              "checkpoint: 3.5× more checkpoints in the same memory.\n"
              "- **The error is small but real.** bf16 keeps 8 significant bits (a relative rounding of up to 2⁻⁸ ≈ 0.4%), int8 127 levels "
              "per key channel. The restored state is a slightly different state, and every later token is "
              "computed from it.\n"
              "- **Drift compounds through sampling.** The logit drift stays small while the tokens agree; where "
              "two candidates are nearly tied, a small drift flips one token and from there the answer is a "
              "different text. Try the random-weight model (many near ties) and more steps.\n"
              "- **A policy choice.** Compressed checkpoints trade exactness for more hits per byte "
              "(the checkpoint-density page shows what more checkpoints buy); this project keeps fp32 as the "
              "default so that caching never changes an answer.",
        "zh": "- **fp32 是精确的。** 恢复逐位复制保存的状态（恢复误差为 0），B 的 token 与不使用缓存的运行完全相同：这是"
              "默认设置，也是所有等价性测试的前提。它的 |Δlogit| 不一定为 0（训练过的小模型上约 1e-5）：这不是 "
              "checkpoint 造成的，而是 B 的提示词分两段而不是在一次前向中计算，fp32 在最后几位上的舍入因此不同（表格下方"
              "的说明在不使用任何缓存的情况下测出了同样的效应）。\n"
              "- **bf16 让状态减半，int8 减为四分之一**（再加上卷积窗口，以及 int8 每个 head、每个 key 通道一个 fp32 "
              "scale）。在 Kimi-Linear-48B 的规模上，每个 checkpoint 从 41.4 → 21.4 → 11.7 MiB：同样的内存能放下 3.5 "
              "倍的 checkpoint。\n"
              "- **误差很小但真实存在。** bf16 保留 8 位有效数字（相对舍入误差最多 2⁻⁸ ≈ 0.4%），int8 每个 key 通道 127 个级别。恢复出的"
              "状态是一个略有不同的状态，之后的每个 token 都由它计算。\n"
              "- **漂移会通过采样累积。** 只要 token 一致，logit 漂移就很小；当两个候选几乎并列时，一点漂移就会翻转一个 "
              "token，从那以后回答就是另一段文字。试试随机权重模型（并列很多）和更多步数。\n"
              "- **这是一个策略选择。** 压缩 checkpoint 用精确性换取每字节更多的命中（checkpoint 密度页展示了更多 "
              "checkpoint 能带来什么）；本项目默认使用 fp32，以保证缓存永远不改变答案。",
    },
    "compressed_checkpoints.exact_note": {
        "en": "fp32: the restored state is the saved one bit for bit, and B's tokens are the cache-less run's. "
              "B's logits still differ from the reference by up to {fp32}: with a hit B computes only its "
              "question on top of the state A's forward left at token {S}, while the reference computes B's "
              "whole prompt in one forward, and fp32 rounds products of different shapes differently in the "
              "last bits. Two runs without any cache show the same effect: B prefilled in one forward and in "
              "two (stopping at token {S}) differ by {split}.",
        "zh": "fp32：恢复出的状态与保存的状态逐位相同，B 的 token 与不使用缓存的运行相同。B 的 logits 与参考仍相差最多 "
              "{fp32}：命中时 B 只在 A 的前向留在第 {S} 个 token 处的状态之上计算它的问题，而参考在一次前向中计算 B "
              "的整个提示词，fp32 对不同形状的乘积在最后几位上舍入不同。两次都不使用任何缓存的运行也有同样的效应："
              "B 在一次前向中 prefill 与分两次（在第 {S} 个 token 处停下）prefill，相差 {split}。",
    },
    "compressed_checkpoints.col.cache": {"en": "prefix cache", "zh": "前缀缓存"},
    "compressed_checkpoints.col.hits": {"en": "prefix hits", "zh": "前缀命中次数"},
    "compressed_checkpoints.col.changed": {"en": "answers changed", "zh": "答案改变的请求"},
    "compressed_checkpoints.promise_title": {
        "en": "How often does a lossy checkpoint change an answer?",
        "zh": "有损 checkpoint 多常改变答案？",
    },
    "compressed_checkpoints.promise_intro": {
        "en": ("This project promises that caching never changes an answer, and it keeps that promise with **fp32 "
               "checkpoints** (the default): a restored state is bit for bit the state it saved, so what "
               "differs from the request run alone is only the last-bit rounding of a prompt computed in two "
               "pieces, and no greedy answer measured here or in the tests has changed. bf16 and int8 checkpoints save memory by storing an "
               "approximation, so an answer whose next token was a near tie can flip, and with it everything "
               "after. Measure it: a stream of requests sharing system prompts and conversation turns, served "
               "by the radix and the block cache with each dtype, every answer compared with the same request "
               "run alone."),
        "zh": ("本项目承诺缓存永远不会改变答案，而这一承诺在 **fp32 checkpoint**（默认）下成立：恢复出的状态与保存时"
               "逐位相同，与该请求单独运行相比，唯一的差别是提示词分两段计算带来的最后几位舍入，这里和测试中测得的贪心"
               "答案没有一个改变。bf16 和 int8 checkpoint 通过存储近似值来节省"
               "内存，因此下一个 token 接近平局的答案可能翻转，其后的内容也随之改变。测量一下：一串共享系统提示词和"
               "对话轮次的请求，分别由 radix 缓存和 block 缓存在每种数据类型下处理，每个答案都与同一请求单独运行的"
               "结果比较。"),
    },
    "compressed_checkpoints.promise_requests": {"en": "requests in the stream", "zh": "请求流中的请求数"},
    "compressed_checkpoints.promise_run": {"en": "Measure", "zh": "测量"},
    "compressed_checkpoints.promise_of": {
        "en": "Measured with the {model}, {n} requests per cache and dtype (fp32 changing any answer would fail the run).",
        "zh": "使用{model}测量，每种缓存和数据类型 {n} 个请求（fp32 若改变任何答案，本次测量会失败）。",
    },
}
