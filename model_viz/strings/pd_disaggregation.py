"""UI strings of the page ``app_pages/pd_disaggregation.py`` (namespace ``pd_disaggregation.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "pd_disaggregation.nav": {
        "en": "Disaggregation",
        "zh": "PD 分离",
    },
    "pd_disaggregation.caption": {
        "en": "A prefill instance hands a request to a decode instance: for a hybrid that is the MLA KV and every "
              "KDA layer's state and conv window, at one boundary, checked before use.",
        "zh": "prefill 实例把请求交给 decode 实例：对混合模型来说，这是 MLA KV 以及每个 KDA 层的状态和卷积窗口，它们处于"
              "同一个边界，使用前要先检查。",
    },
    "pd_disaggregation.title": {
        "en": "Disaggregation no longer moves only KV",
        "zh": "分离部署搬运的不再只是 KV",
    },
    "pd_disaggregation.intro": {
        "en": "One request of the trained tiny model ({P} prompt tokens, {N} generated) goes through a prefill engine "
              "and a decode engine with separate memory pools (`kda_ref.disagg.DisaggregatedLLM`, both in this "
              "process). The tokens are one engine's (checked). Step through the stages.",
        "zh": "训练过的小模型的一个请求（提示词 {P} 个 token，生成 {N} 个）依次经过内存池彼此独立的 prefill 引擎和 decode "
              "引擎（`kda_ref.disagg.DisaggregatedLLM`，两者都在本进程中）。生成的 token 与单个引擎相同（已检查）。逐步查看"
              "各个阶段。",
    },
    "pd_disaggregation.step_label": {
        "en": "Stage",
        "zh": "阶段",
    },
    "pd_disaggregation.stage.prefill": {
        "en": "prefill",
        "zh": "prefill",
    },
    "pd_disaggregation.stage.capture": {
        "en": "capture",
        "zh": "捕获",
    },
    "pd_disaggregation.stage.transfer": {
        "en": "transfer",
        "zh": "传输",
    },
    "pd_disaggregation.stage.verify": {
        "en": "verify + install",
        "zh": "校验 + 安装",
    },
    "pd_disaggregation.stage.decode": {
        "en": "decode",
        "zh": "decode",
    },
    "pd_disaggregation.text.prefill": {
        "en": "The prefill engine runs the {P} prompt tokens in its slot {slot} and pages {pages}, and samples the "
              "first token ({tok}). Its KV rows were final as soon as each chunk was computed; its KDA states are "
              "final only now -- which is why SGLang sends KV chunk by chunk but the states with the last chunk.",
        "zh": "prefill 引擎在它的槽位 {slot} 和页 {pages} 中运行 {P} 个提示词 token，并采样出第一个 token（{tok}）。KV 行"
              "在每个 chunk 算完时就已定型；KDA 状态直到现在才定型——这就是 SGLang 逐 chunk 发送 KV、却只随最后一个 chunk "
              "发送状态的原因。",
    },
    "pd_disaggregation.text.capture": {
        "en": "Before the slot and pages are freed, the regions are copied into one staging buffer and described by a "
              "manifest: every region's kind, layer, bytes, shape, the boundary it belongs to, and a CRC-32 "
              "({total} bytes in all).",
        "zh": "在槽位和页被释放之前，这些区域被复制到一个暂存缓冲区，并由一份清单描述：每个区域的类型、层、字节数、形状、"
              "所属边界和 CRC-32（共 {total} 字节）。",
    },
    "pd_disaggregation.text.transfer": {
        "en": "The transfer engine writes the staging buffer into a buffer the decode side registered and reports "
              "DONE ({ms:.2f} ms here). That is its whole job: it does not know that these bytes are three kinds of "
              "state at one boundary (Mooncake: registered buffers, batch transfers, a status).",
        "zh": "传输引擎把暂存缓冲区写入 decode 侧注册的缓冲区，并报告 DONE（这里用了 {ms:.2f} ms）。这就是它的全部职责：它"
              "不知道这些字节是同一边界上的三种状态（Mooncake：注册缓冲区、批量传输、状态码）。",
    },
    "pd_disaggregation.text.verify": {
        "en": "The decode engine checks the manifest -- the boundary is its prompt's end, the prompt hash matches, every "
              "KDA and MLA layer has its regions, every region belongs to the same boundary, every CRC-32 matches -- "
              "then allocates slot {slot} and pages {pages} in its own pool and installs the regions.",
        "zh": "decode 引擎检查清单——边界是其提示词的末尾、提示词哈希一致、每个 KDA 层和 MLA 层都有自己的区域、所有区域属于"
              "同一个边界、每个 CRC-32 都一致——然后在自己的内存池中分配槽位 {slot} 和页 {pages}，并安装这些区域。",
    },
    "pd_disaggregation.text.decode": {
        "en": "The decode engine continues from the first token and generates the rest; both pools are empty "
              "afterwards: {empty}.",
        "zh": "decode 引擎从第一个 token 继续，生成其余的 token；之后两个内存池都为空：{empty}。",
    },
    "pd_disaggregation.bytes_text": {
        "en": "What one handoff carries, by prompt length. The KDA states and conv windows are a fixed size: for "
              "Kimi-Linear-48B 40 MiB of states (20 KDA layers x 2 MiB) against 7.9 MiB of KV at 1k tokens -- 84% of "
              "the handoff is state; past about 5k tokens the KV dominates.",
        "zh": "一次交接携带的内容，按提示词长度。KDA 状态和卷积窗口的大小固定：对 Kimi-Linear-48B，1k 个 token 时状态为 "
              "40 MiB（20 个 KDA 层 x 2 MiB），而 KV 只有 7.9 MiB——交接中 84% 是状态；超过约 5k 个 token 后 KV 占主导。",
    },
    "pd_disaggregation.break_label": {
        "en": "Break it: ship a handoff the decode side must refuse",
        "zh": "弄坏它：发送一个 decode 侧必须拒绝的交接",
    },
    "pd_disaggregation.break_mode": {
        "en": "What is wrong",
        "zh": "哪里错了",
    },
    "pd_disaggregation.break.boundary": {
        "en": "states of another boundary than the KV",
        "zh": "状态与 KV 属于不同边界",
    },
    "pd_disaggregation.break.kv_only": {
        "en": "only the KV (a pure-attention handoff)",
        "zh": "只有 KV（纯注意力模型的交接）",
    },
    "pd_disaggregation.broken.refused": {
        "en": "The decode side refuses it: `{why}` -- it releases what it allocated and prefills the prompt itself. "
              "Had it installed the handoff without checking, the output would leave the right one at token {d}:",
        "zh": "decode 侧拒绝了它：`{why}`——释放已分配的资源并自己 prefill 这个提示词。如果不检查就安装，输出会从第 {d} 个 "
              "token 起偏离正确结果：",
    },
    "pd_disaggregation.broken.same": {
        "en": "The decode side refuses it: `{why}`. Installed without checking, this handoff happened to give the same "
              "tokens here -- a wrong state is not always visible at once, which is why it must be checked.",
        "zh": "decode 侧拒绝了它：`{why}`。不检查就安装时，这次交接在这里碰巧给出相同的 token——错误的状态并不总是立刻可见，"
              "所以必须检查。",
    },
    "pd_disaggregation.broken.ref": {
        "en": "checked (right)",
        "zh": "检查后（正确）",
    },
    "pd_disaggregation.broken.bad": {
        "en": "installed unchecked",
        "zh": "未检查就安装",
    },
    "pd_disaggregation.epd": {
        "en": "**EPD.** With a multimodal model an encoder instance turns images into embeddings first. Only those "
              "embeddings cross E -> P (visual tokens x hidden size x 2 bytes: 4.5 MiB per 1,024 visual tokens at "
              "a hidden size of 2,304); the KDA states and conv windows are born at P, when the embeddings pass the "
              "KDA layers, and cross only P -> D. No encoder is built here.",
        "zh": "**EPD。** 对多模态模型，编码器实例先把图像变成嵌入。只有这些嵌入跨越 E -> P（视觉 token 数 x 隐藏维度 x 2 字节："
              "隐藏维度 2,304 时每 1,024 个视觉 token 为 4.5 MiB）；KDA 状态和卷积窗口在 P 处、嵌入经过 KDA 层时才产生，"
              "只跨越 P -> D。这里没有构建编码器。",
    },
    "pd_disaggregation.kind.kv": {
        "en": "MLA KV",
        "zh": "MLA KV",
    },
    "pd_disaggregation.kind.state": {
        "en": "KDA state",
        "zh": "KDA 状态",
    },
    "pd_disaggregation.kind.conv": {
        "en": "conv window",
        "zh": "卷积窗口",
    },
    "pd_disaggregation.col.kind": {
        "en": "region",
        "zh": "区域",
    },
    "pd_disaggregation.col.layer": {
        "en": "layer",
        "zh": "层",
    },
    "pd_disaggregation.col.bytes": {
        "en": "bytes",
        "zh": "字节",
    },
    "pd_disaggregation.col.shape": {
        "en": "shape",
        "zh": "形状",
    },
    "pd_disaggregation.col.boundary": {
        "en": "boundary",
        "zh": "边界",
    },
    "pd_disaggregation.col.crc": {
        "en": "CRC-32",
        "zh": "CRC-32",
    },
    "pd_disaggregation.fig.stage_title": {
        "en": "Stage {n}/{N}: {stage}",
        "zh": "阶段 {n}/{N}：{stage}",
    },
    "pd_disaggregation.fig.transfer_engine": {
        "en": "the transfer engine's job",
        "zh": "传输引擎的职责",
    },
    "pd_disaggregation.fig.prefill_side": {
        "en": "prefill engine",
        "zh": "prefill 引擎",
    },
    "pd_disaggregation.fig.decode_side": {
        "en": "decode engine",
        "zh": "decode 引擎",
    },
    "pd_disaggregation.fig.manifest_title": {
        "en": "Manifest of request {req}: boundary {b}, first token {tok}, {total} bytes",
        "zh": "请求 {req} 的清单：边界 {b}，第一个 token {tok}，共 {total} 字节",
    },
    "pd_disaggregation.fig.sends_title": {
        "en": "The request's {n} sends: KV rows as each prefill chunk finishes them, the states only in the last",
        "zh": "该请求的 {n} 次发送：每个 prefill chunk 算完的 KV 行随即发出，状态只在最后一次",
    },
    "pd_disaggregation.send.chunk": {
        "en": "after a chunk",
        "zh": "chunk 之后",
    },
    "pd_disaggregation.send.last": {
        "en": "last (boundary final)",
        "zh": "最后一次（边界已定）",
    },
    "pd_disaggregation.col.send": {
        "en": "send",
        "zh": "发送",
    },
    "pd_disaggregation.col.when": {
        "en": "when",
        "zh": "时机",
    },
    "pd_disaggregation.col.rows": {
        "en": "KV rows",
        "zh": "KV 行",
    },
    "pd_disaggregation.sends_text": {
        "en": "The prefill engine runs {step} tokens per step, so the prompt is prefilled in chunks. After each chunk "
              "the KV rows it finished -- whole pages; the last partial page waits, as in SGLang -- leave for the "
              "buffer the decode side sized when the request arrived. The KDA states and conv windows go once, in "
              "the last send: before that they describe a boundary nobody will decode from, and sending them per "
              "chunk would cost their full size every time (40 MiB at 48B). The manifest's checksums cover every "
              "row, early ones included.",
        "zh": "prefill 引擎每步处理 {step} 个 token，所以提示词分 chunk 预填充。每个 chunk 之后，它算完的 KV 行（整页；"
              "最后不满的一页要等，与 SGLang 相同）就发往 decode 侧在请求到达时就按大小准备好的缓冲区。KDA 状态和卷积窗口"
              "只在最后一次发送中出现一次：在那之前它们描述的是一个没有人会从它开始 decode 的边界，逐 chunk 发送它们每次都要"
              "付出完整大小（48B 上为 40 MiB）。清单的校验和覆盖每一行，包括提前发出的行。",
    },
    "pd_disaggregation.fig.bytes_tiny": {
        "en": "tiny model (fp32 states, bf16 conv and KV)",
        "zh": "小模型（状态 fp32，卷积和 KV bf16）",
    },
    "pd_disaggregation.fig.bytes_48b": {
        "en": "Kimi-Linear-48B (as served)",
        "zh": "Kimi-Linear-48B（部署时的精度）",
    },
    "pd_disaggregation.fig.bytes_x": {
        "en": "prompt tokens",
        "zh": "提示词 token 数",
    },
    "pd_disaggregation.watch": {
        "en": "- **Three kinds, one boundary.** The manifest lists KV rows and, per KDA layer, a state and a conv window; "
              "all at the prompt's end.\n"
              "- **The transfer engine only moves bytes.** Everything around the dashed box -- what, when, where to, "
              "what if it is wrong -- is the serving engines'.\n"
              "- **Checked, or recomputed.** Break it: a mixed boundary or a KV-only handoff is refused and the prompt "
              "recomputed; installed unchecked, the tokens leave the right ones.",
        "zh": "- **三种状态，一个边界。** 清单列出 KV 行，以及每个 KDA 层的状态和卷积窗口；都在提示词末尾。\n"
              "- **传输引擎只搬字节。** 虚线框之外的一切——搬什么、何时、搬到哪、出错怎么办——都是服务引擎的职责。\n"
              "- **要么校验，要么重算。** 弄坏它：边界混杂或只有 KV 的交接会被拒绝，提示词被重算；不检查就安装，token 会偏离"
              "正确结果。",
    },
}
