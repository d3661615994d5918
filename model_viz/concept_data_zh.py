"""Chinese for the concept map's source notes (:attr:`~model_viz.concept_types.SourceRef.detail` and
``note``), keyed by the English text: the concepts panel shows these in the Chinese UI. A note changed in
:mod:`model_viz.concept_data` without its entry here fails ``tests/test_viz_concepts.py``; code in a note
(identifiers, paths, expressions, PR numbers) stays as written."""

SOURCE_NOTES_ZH: dict[str, str] = {
    ("BlockStored / BlockRemoved / AllBlocksCleared as positional arrays tagged by class, batches "
     "[ts, events, attn_dp_rank], port + dp rank; the replay ROUTER answers [seq, payload] then END_SEQ "
     "(0.5.23 sends tagged maps and repeats the topic)"):
        ("BlockStored / BlockRemoved / AllBlocksCleared 是以类名为标签的位置数组，批次为 [ts, events, attn_dp_rank]，"
         "端口为基准端口加 dp rank；重放 ROUTER 先回答 [seq, payload]，最后发 END_SEQ（0.5.23 改为发送以 type "
         "为标签的映射，并重复 topic 帧）"),
    ("PUB bound for * / :: / ipc / inproc else connected; replay ROUTER takes an 8-byte start sequence "
     "and answers every buffered batch, then END_SEQ = -1; 0.32.0 adds group_idx and "
     "kv_cache_spec_kind and sends events as maps tagged by type"):
        ("地址含 * / :: 或为 ipc / inproc 时 PUB 绑定，否则连接；重放 ROUTER 接收 8 字节的起始序号，回答缓冲中的"
         "每一批，最后发 END_SEQ = -1；0.32.0 增加了 group_idx 和 kv_cache_spec_kind，并把事件作为以 type 为标签"
         "的映射发送"),
    ("sends a one-token request and answers 503 unless tokenizer_manager.last_receive_tstamp moves within "
     "HEALTH_CHECK_TIMEOUT (20 s); the scheduler's own watchdog (utils/watchdog.py, WatchdogRaw) runs "
     "inside the scheduler process"):
        ("发送一个只生成一个 token 的请求，若 tokenizer_manager.last_receive_tstamp 在 HEALTH_CHECK_TIMEOUT（20 秒）内"
         "没有更新就返回 503；scheduler 自己的看门狗（utils/watchdog.py，WatchdogRaw）运行在 scheduler 进程内部"),
    "raises only when the engine is errored (dead); a live engine core that stopped answering passes":
        "只在引擎已出错（死亡）时抛出异常；仍然存活但不再应答的 engine core 会通过检查",
    ("send_to_scheduler: a ZMQ PUSH socket to the scheduler process (with one tokenizer worker, the "
     "default); results come back from the detokenizer process on a PULL socket (recv_from_detokenizer)"):
        ("send_to_scheduler：通往 scheduler 进程的 ZMQ PUSH 套接字（只有一个 tokenizer worker 时，即默认情况）；"
         "结果经 PULL 套接字从 detokenizer 进程返回（recv_from_detokenizer）"),
    ("requests go to EngineCoreProc over a ZMQ input socket; an asyncio task of the API server reads the "
     "output socket (output_queue_task); utility calls via call_utility_async; EngineDeadError once the "
     "engine process is gone"):
        ("请求经 ZMQ 输入套接字发往 EngineCoreProc；API 服务器的一个 asyncio 任务读取输出套接字"
         "（output_queue_task）；工具调用走 call_utility_async；引擎进程退出后抛出 EngineDeadError"),
    ("fused_sigmoid_gating_delta_rule_update(..., initial_state_indices=cache_indices, is_kda=Tr"
     "ue)"):
        ("fused_sigmoid_gating_delta_rule_update(..., initial_state_in"
         "dices=cache_indices, is_kda=True)"),
    "when num_prefills == 0: fused_recurrent_kda":
        "当 num_prefills == 0 时：fused_recurrent_kda",
    "state [N, HV, K, V]":
        "state [N, HV, K, V]",
    "the delta-rule update inside the fused kernel":
        "融合 kernel 内部的 delta-rule 更新",
    "fused_recurrent_kda / chunk_kda":
        "fused_recurrent_kda / chunk_kda",
    "S = S * exp(g); S += (beta k) (v - k^T S)^T; o = q^T S after the update":
        ("S = S * exp(g); S += (beta k) (v - k^T S)^T; o = q^T S 在更新之后"
         "计算"),
    ("raw forget gate f_b_proj(f_a_proj(x)); prefill passes it raw to chunk_kda with A_log and d"
     "t_bias, decode and verify kernels apply the activation internally"):
        ("原始遗忘门 f_b_proj(f_a_proj(x))；prefill 将其原样传给 chunk_kda，并附带 A_l"
         "og 和 dt_bias，decode 和 verify kernel 在内部应用激活函数"),
    ("imports fused_kda_gate from .fla.ops.kda and calls g = fused_kda_gate(g, A_log, head_dim, "
     "g_bias=dt_bias)"):
        ("导入 fused_kda_gate（来自 .fla.ops.kda），并调用 g = fused_kda_gate(g,"
         " A_log, head_dim, g_bias=dt_bias)"),
    "g = -exp(A_log) * softplus(g + dt_bias); fused_kda_gate is defined in the same file":
        ("g = -exp(A_log) * softplus(g + dt_bias)；fused_kda_gate 定义在同一"
         "文件中"),
    ("the closest engine analogue: the state after every draft token, kept in a buffer for verif"
     "ication"):
        "引擎中最接近的对应物：每个草稿 token 之后的状态，保存在缓冲区中供验证使用",
    "one state per sequence, overwritten in place":
        "每个序列一个状态，原地覆盖",
    "new_node.mamba_value = None: a state cannot be split":
        "new_node.mamba_value = None：状态无法拆分",
    "mamba only needs to keep the state of the last computed token":
        "mamba 只需保存最后一个已计算 token 的状态",
    "chunk_kda(..., initial_state_indices=cache_indices, cu_seqlens=query_start_loc)":
        ("chunk_kda(..., initial_state_indices=cache_indices, cu_seqle"
         "ns=query_start_loc)"),
    "when num_prefills > 0: chunk_kda over the non-spec tokens":
        "当 num_prefills > 0 时：chunk_kda 处理所有非投机 token",
    "chunk_size 64; the chunk-start states h are computed and dropped":
        "chunk_size 64；分块起始状态 h 计算后即被丢弃",
    "an unaligned tracked length reads h[offset + len // chunk], an aligned one the final state":
        "未对齐的跟踪长度读取 h[offset + len // chunk]，对齐的则读取最终状态",
    ("vLLM does not read the chunk kernel's chunk-start states; its align mode ends scheduler st"
     "eps on block boundaries instead (MambaPrefillChunkAlignmentPolicy)"):
        ("vLLM 不读取 chunk kernel 的分块起始状态；其 align 模式改为让调度步在块边界处结束（MambaP"
         "refillChunkAlignmentPolicy）"),
    ("causal_conv1d_fn on conv_states with has_initial_state = extend_prefix_lens > 0; forward_d"
     "ecode uses causal_conv1d_update"):
        ("causal_conv1d_fn 作用于 conv_states，has_initial_state = extend_"
         "prefix_lens > 0；forward_decode 使用 causal_conv1d_update"),
    "conv_state_q / conv_state_k / conv_state_v (newer trees fuse them into one conv_state)":
        ("conv_state_q / conv_state_k / conv_state_v（较新的代码树将它们融合为一个 co"
         "nv_state）"),
    "kv_buffer per layer: (size + 1, 1, kv_lora_rank + qk_rope_head_dim)":
        ("每层一个 kv_buffer：(size + 1, 1, kv_lora_rank + qk_rope_head_dim"
         ")"),
    "one latent row per token per layer":
        "每层每个 token 一行 latent",
    "its MambaPool holds conv + temporal state; HybridLinearKVPool the full-attention (MLA) KV":
        ("其 MambaPool 保存 conv + temporal 状态；HybridLinearKVPool 保存全注意力（"
         "MLA）KV"),
    "beside MLAAttentionSpec; layers of one spec are grouped into equal-size KV cache groups":
        "与 MLAAttentionSpec 并列；同一 spec 的层被分为大小相等的 KV 缓存组",
    "(conv + temporal bytes) x layers; KimiLinearCacheParams supplies the KDA shapes":
        "（conv + temporal 字节数）x 层数；KimiLinearCacheParams 提供 KDA 的形状",
    "(conv_state_shape, (heads, head_dim, head_dim)); MambaSpec.page_size_bytes sums them":
        ("(conv_state_shape, (heads, head_dim, head_dim))；MambaSpec.pa"
         "ge_size_bytes 将它们求和"),
    "KimiDeltaAttention if config.is_kda_layer(i), else KimiMLAAttention":
        ("KimiDeltaAttention（当 config.is_kda_layer(i) 时），否则为 KimiMLAAt"
         "tention"),
    "the same is_kda_layer switch":
        "同样的 is_kda_layer 分支判断",
    ("mamba_cache_indices = req_to_token_pool.get_mamba_indices(req_pool_indices), query_start_l"
     "oc"):
        ("mamba_cache_indices = req_to_token_pool.get_mamba_indices(re"
         "q_pool_indices), query_start_loc"),
    ("non_spec_state_indices_tensor, has_initial_state = context_lens > 0, non_spec_query_start_"
     "loc"):
        ("non_spec_state_indices_tensor, has_initial_state = context_l"
         "ens > 0, non_spec_query_start_loc"),
    "decode_kernel and extend_kernel (Triton); newer trees: linear/kda_kernel_dispatcher.py":
        ("decode_kernel 和 extend_kernel（Triton）；较新的代码树：linear/kda_kern"
         "el_dispatcher.py"),
    "if attn_metadata.num_prefills > 0: chunk_kda, else fused_recurrent_kda":
        ("若 attn_metadata.num_prefills > 0：chunk_kda，否则 fused_recurren"
         "t_kda"),
    ("MIXED counts as extend (is_decode is DECODE only), so HybridLinearAttnBackend.forward send"
     "s it to forward_extend"):
        ("MIXED 计为 extend（is_decode 仅对 DECODE 成立），因此 HybridLinearAttnB"
         "ackend.forward 将其交给 forward_extend"),
    ("if attn_metadata.num_prefills > 0: the chunk path for all non-speculative tokens, decodes "
     "included"):
        ("若 attn_metadata.num_prefills > 0：所有非投机 token（包括 decode）都走 ch"
         "unk 路径"),
    ("disable_state_update=True, intermediate_states_buffer, cache_steps, retrieve_parent_token "
     "(trees: in layers/attention/fla/fused_sigmoid_gating_recurrent.py, fused_sigmoid_gating_de"
     "lta_rule_update_kernel, commit 06a2775, HAS_EAGLE_TREE_CUSTOM_ATTN_MASK loads every step b"
     "ut the first from its parent step's intermediate state; ours: recurrent_kda_verify(parents"
     "=...), kda_ref.engine.tree_verify)"):
        ("disable_state_update=True, intermediate_states_buffer, cache"
         "_steps, retrieve_parent_token（树形草稿：位于 layers/attention/fla/f"
         "used_sigmoid_gating_recurrent.py 的 fused_sigmoid_gating_delt"
         "a_rule_update_kernel，commit 06a2775，HAS_EAGLE_TREE_CUSTOM_AT"
         "TN_MASK 使除第一步外的每一步都从其父步骤的中间状态加载；我们的实现：recurrent_kda_verify(p"
         "arents=...)，kda_ref.engine.tree_verify）"),
    ("spec_state_indices_tensor [batch, num_spec + 1], num_accepted_tokens: the next step reads "
     "slot num_accepted - 1, nothing is copied"):
        ("spec_state_indices_tensor [batch, num_spec + 1]，num_accepted"
         "_tokens：下一步读取槽位 num_accepted - 1，不做任何复制"),
    ("req_pool_indices[bs - num_padding:] = 0, then mamba_indices[bs - num_padding:] = -1; per-b"
     "s buffers from init_cuda_graph_state; get_cuda_graph_seq_len_fill_value() = 1"):
        ("req_pool_indices[bs - num_padding:] = 0，然后 mamba_indices[bs "
         "- num_padding:] = -1；每个 bs 的缓冲区来自 init_cuda_graph_state；get_"
         "cuda_graph_seq_len_fill_value() = 1"),
    ("full-cudagraph decode: non_spec_state_indices_tensor[num_decodes:].fill_(PAD_SLOT_ID), non"
     "_spec_query_start_loc tail filled with the last offset"):
        ("full-cudagraph decode：non_spec_state_indices_tensor[num_deco"
         "des:].fill_(PAD_SLOT_ID)，non_spec_query_start_loc 的尾部用最后一个偏移"
         "量填充"),
    ("capture() walks capture_bs largest first at startup; run_once() twice as warm-up on the du"
     "mmy buffers, then torch.cuda.graph(graph, pool=global_graph_memory_pool, stream=stream); r"
     "eplay() copies the batch in, replays, returns views of output_buffers[bs] cut to raw_num_t"
     "oken"):
        ("启动时 capture() 从大到小遍历 capture_bs；run_once() 在 dummy 缓冲区上运行两次作"
         "为预热，然后 torch.cuda.graph(graph, pool=global_graph_memory_pool"
         ", stream=stream)；replay() 将批次复制进来、重放，并返回 output_buffers[bs] "
         "截取到 raw_num_token 的视图"),
    ("compile_bs = capture_bs <= torch_compile_max_bs when enable_torch_compile; then patch_mode"
     "l yields torch.compile(model.forward, mode='max-autotune-no-cudagraphs', dynamic=False), t"
     "hen the graph is captured"):
        ("compile_bs = capture_bs <= torch_compile_max_bs（当启用 enable_t"
         "orch_compile 时）；随后 patch_model 产出 torch.compile(model.forwar"
         "d, mode='max-autotune-no-cudagraphs', dynamic=False)，然后再捕获 g"
         "raph"),
    ("KimiDeltaAttention.forward calls torch.ops.vllm.kda_attention, registered by direct_regist"
     "er_custom_op(op_name='kda_attention', mutates_args=['core_attn_out']); the op reads self.k"
     "v_cache from the forward context, so the compiled graph never holds the conv / recurrent c"
     "aches; direct_register_custom_op (vllm/utils/torch_utils.py, commit 0024350b) defines the "
     "op's schema and kernel in a torch.library.Library directly: 'torch.library.custom_op can h"
     "ave significant overhead'"):
        ("KimiDeltaAttention.forward 调用 torch.ops.vllm.kda_attention，该"
         " op 由 direct_register_custom_op(op_name='kda_attention', mut"
         "ates_args=['core_attn_out']) 注册；该 op 从 forward context 中读取 s"
         "elf.kv_cache，因此编译后的图从不持有 conv / recurrent 缓存；direct_register"
         "_custom_op（vllm/utils/torch_utils.py，commit 0024350b）直接在 tor"
         "ch.library.Library 中定义该 op 的 schema 和 kernel，其注释说 torch.library.custom_op 的开销可能很大"
         "（'torch.library.custom_op can have significant overhead'）"),
    ("\"QKV activations stay rank-local; only the much smaller per-segment state transforms are g"
     "athered\"; zigzag: each rank owns blocks r and 2R - 1 - r of every request (ours: one conti"
     "guous slice); at this commit kda_use_prefill_cp requires is_npu(); maps as [H | M] (compos"
     "e_kda_cp_affine_states). SGLang PR #34059 (open as read on 2026-12-02) adds a contiguous s"
     "plit, one slice per rank, like ours"):
        ("源码注释说 QKV 激活留在各 rank 本地，只收集小得多的逐段状态变换"
         "（\"QKV activations stay rank-local; only the much smaller per-segment state transforms are gathered\"）；zigzag：每个 rank 拥有每个请求"
         "的块 r 和 2R - 1 - r（我们的实现：一个连续切片）；在此 commit 中 kda_use_prefill_"
         "cp 要求 is_npu()；映射为 [H | M]（compose_kda_cp_affine_states）。SGL"
         "ang PR #34059（于 2026-12-02 查阅时仍为 open）增加了连续切分，每个 rank 一个切片，与"
         "我们的实现相同"),
    ("vLLM's prefill context parallelism (RFC #25749, open; MLA support merged as PR #46570, GQA"
     " pending in PR #49564, as read on 2026-12-02; the first full PR, #26864 (PCP with GQA on "
     "FlashInfer), was closed unmerged and split: its basic PCP plumbing (a PCP process group, the "
     "command-line arguments, KV-cache block tables) merged as PR #28718, while its GQA FlashInfer "
     "part, PR #28723, and an early MLA port, PR #28988, were closed unmerged) splits attention "
     "layers only; no KDA / GDN path was found"):
        ("vLLM 的 prefill 上下文并行（RFC #25749，open；MLA 支持已通过 PR #46570 合并，"
         "GQA 仍在 PR #49564 中待定，截至 2026-12-02 查阅；最早的完整 PR #26864（在 FlashInfer 上"
         "支持 GQA 的 PCP）未合并即关闭并被拆分：其中 PCP 的基础部分（PCP 进程组、命令行参数、KV cache "
         "block table）作为 PR #28718 合并，而 GQA FlashInfer 部分 PR #28723 和早期的一个 MLA 移植 "
         "PR #28988 都未合并即关闭）仅切分注意力层；未找到 KDA / GDN 路径"),
    ("hm = k.new_zeros(HV, K, V + K): [S | M], the state columns first, per head in fp32; all_ga"
     "ther_into_tensor, predecessors merged into initial_state (merged in PR #691, commit 13a908"
     "74)"):
        ("hm = k.new_zeros(HV, K, V + K)：[S | M]，状态列在前，每个 head 以 fp32 "
         "存储；all_gather_into_tensor，前驱合并进 initial_state（于 PR #691 合并，c"
         "ommit 13a90874）"),
    ("KV pages sent chunk by chunk; the first token goes to the metadata buffer with the last ch"
     "unk (is_last); Success / Failed polled in process_disagg_prefill_inflight_queue. The decod"
     "e side preallocates KV pages and a Mamba slot before the transfer (DecodePreallocQueue, di"
     "saggregation/decode.py @278e503a); the pair is chosen per request (MiniLoadBalancer.select"
     "_pair, disaggregation/mini_lb.py @001c2ae0: random prefill and decode server, joined by a "
     "bootstrap_room)"):
        ("KV 页按分块逐个发送；第一个 token 随最后一个分块（is_last）写入 metadata 缓冲区；Succes"
         "s / Failed 在 process_disagg_prefill_inflight_queue 中轮询。decod"
         "e 端在传输前预分配 KV 页和一个 Mamba 槽位（DecodePreallocQueue，disaggregati"
         "on/decode.py @278e503a）；每个请求单独选择一对服务器（MiniLoadBalancer.selec"
         "t_pair，disaggregation/mini_lb.py @001c2ae0：随机选择 prefill 和 de"
         "code 服务器，通过 bootstrap_room 关联）"),
    ("KDA layers travel in vLLM's hybrid KV-cache manager as a Mamba-type group; NixlConnector's"
     " Mamba / GDN transfer (PRs #37635, #41869) was not read at a commit here"):
        ("KDA 层在 vLLM 的混合 KV cache 管理器中作为 Mamba 类型的组进行传输；NixlConnector"
         " 的 Mamba / GDN 传输（PR #37635、#41869）未在此处按某个 commit 查阅"),
    ("return get_attn_backend().forward(layer=self, ...); the states are found in "
     "`MambaAttnBackendBase._forward_metadata` and `KDAAttnBackend.forward_*`"):
        ("return get_attn_backend().forward(layer=self, ...)；状态位于 "
         "`MambaAttnBackendBase._forward_metadata` 和 `KDAAttnBackend.forward_*` 中"),
    "reached through the kda_attention custom op; the state is self.kv_cache[virtual_engine]":
        "通过 kda_attention 自定义 op 调用；状态为 self.kv_cache[virtual_engine]",
    ("the class the article names (Kimi K3; a full-rank gate option); Kimi-Linear's is models/ki"
     "mi_linear.py::KimiDeltaAttention"):
        ("文章所指的类（Kimi K3；提供满秩门控选项）；Kimi-Linear 的对应类是 models/kimi_linea"
         "r.py::KimiDeltaAttention"),
    "K3's KDA layer; its A_log loader takes the first num_heads values of the [head_dim] vector":
        "K3 的 KDA 层；其 A_log 加载器取前 num_heads 个值（来自 [head_dim] 向量）",
    ("the text model built from config.text_config; KimiLinearModel.forward runs the attention r"
     "esiduals"):
        "由 config.text_config 构建的文本模型；KimiLinearModel.forward 执行注意力残差",
    "gate_lower_bound from linear_attn_config":
        "gate_lower_bound，来自 linear_attn_config",
    ("_KDA_GATE_LOGBOUND_MIN = -5.0; the FlashKDA prefill runs only with a bounded gate (is_flas"
     "hkda_supported)"):
        ("_KDA_GATE_LOGBOUND_MIN = -5.0；FlashKDA prefill 仅在门控有界时运行（is_"
         "flashkda_supported）"),
    "g = lower_bound * sigmoid(exp(A_log) * (g + dt_bias))":
        "g = lower_bound * sigmoid(exp(A_log) * (g + dt_bias))",
    "not read for this concept":
        "未针对本概念查阅",
    "the mix fused with the next RMSNorm in one Triton kernel":
        "该混合操作与下一个 RMSNorm 融合在同一个 Triton kernel 中",
    "E8M0 scales decoded to `2**(e-127)`, one per 32 input columns":
        "E8M0 缩放因子解码为 `2**(e-127)`，每 32 个输入列一个",
    ("SGLang's KDA speculative commit replays the kept tokens instead (commit_kda_replayssm_afte"
     "r_verify, see spec.state_rollback)"):
        ("SGLang 的 KDA 投机解码提交阶段改为重放保留的 token（commit_kda_replayssm_afte"
         "r_verify，见 spec.state_rollback）"),
    ("_kda_recoverssm_verify_kernel stores correction_cache [block, head, pos, V] fp32 and kg_ca"
     "che [block, head, pos, 2K]; _prepare_commit_plan_kernel: commit_len = min(num_accepted, qu"
     "ery_len); the commit walks the kept tokens backwards; _compact_conv_state_kernel copies th"
     "e history from offset commit_len - 1"):
        ("_kda_recoverssm_verify_kernel 存储 correction_cache [block, he"
         "ad, pos, V] fp32 和 kg_cache [block, head, pos, 2K]；_prepare_"
         "commit_plan_kernel：commit_len = min(num_accepted, query_len)"
         "；提交过程反向遍历保留的 token；_compact_conv_state_kernel 从偏移 commit_len"
         " - 1 开始复制历史"),
    ("an MLA decoder layer over eh_proj([enorm(embed), hnorm(hidden)]); vllm/config/speculative."
     "py (commit 002e77c1) lists kimi_k3_mtp in MTPModelTypes, part of EagleModelTypes; "
     "vllm/v1/spec_decode/eagle.py EagleProposer.propose (commit 008603a3) runs the draft layer over "
     "every row and computes logits at last_token_indices only"):
        ("基于 eh_proj([enorm(embed), hnorm(hidden)]) 的 MLA decoder 层；vl"
         "lm/config/speculative.py（commit 002e77c1）将 kimi_k3_mtp 列入 MT"
         "PModelTypes，后者属于 EagleModelTypes；vllm/v1/spec_decode/eagle.py 的 "
         "EagleProposer.propose（commit 008603a3）对每一行运行草稿层，只在 last_token_indices 处计算 logits"),
    "a new prefill batch first; mix_with_running only when is_mixed_chunk":
        "优先调度新的 prefill 批次；mix_with_running 仅在 is_mixed_chunk 时进行",
    "RUNNING requests first, then WAITING ones, under one token_budget":
        "先 RUNNING 请求，再 WAITING 请求，共用一个 token_budget",
    "rem_chunk_tokens and new_chunked_req; sized by --chunked-prefill-size":
        ("rem_chunk_tokens 和 new_chunked_req；大小由 --chunked-prefill-siz"
         "e 决定"),
    "num_new_tokens = min(num_new_tokens, token_budget)":
        "num_new_tokens = min(num_new_tokens, token_budget)",
    ("release_req frees the KV from last_uncached_pos on (the cached prefix stays) and re-queues"
     " the request"):
        "release_req 释放从 last_uncached_pos 起的 KV（已缓存前缀保留），并将请求重新入队",
    "called from Scheduler.schedule when kv_cache_manager.allocate_slots fails":
        ("由 Scheduler.schedule 调用，当 kv_cache_manager.allocate_slots 失败"
         "时"),
    ("available + evictable + protected must equal each pool's size when fully idle (a leak chec"
     "k); create_scheduler_watchdog fires when forward_ct stops moving for watchdog_timeout"):
        ("完全空闲时 available + evictable + protected 必须等于每个池的大小（泄漏检查）；cre"
         "ate_scheduler_watchdog 在 forward_ct 于 watchdog_timeout 时间内不再"
         "变化时触发"),
    ("at start-up: the KV cache must hold one request of max_model_len, else a ValueError with t"
     "he largest max_model_len that fits"):
        ("启动时：KV 缓存必须能容纳一个 max_model_len 长度的请求，否则抛出 ValueError，并给出可容纳的"
         "最大 max_model_len"),
    "temporal [layers, slots + 1, ...] beside the conv windows; slot 0 pads":
        "temporal [layers, slots + 1, ...] 与 conv 窗口并列；槽位 0 用于填充",
    "recurrent_state: the layer's float32 state tensor":
        "recurrent_state：该层的 float32 状态张量",
    ("slot 0 is a dummy write target for padded rows; MambaPool.copy_from / fork_from copy state"
     "s"):
        "槽位 0 是填充行的 dummy 写入目标；MambaPool.copy_from / fork_from 复制状态",
    "a state is one block of the mamba group: the block id is the slot":
        "一个状态即 mamba 组中的一个块：块 id 就是槽位",
    "KV of the full-attention (MLA) layers only; MambaPool holds the states":
        "仅包含全注意力（MLA）层的 KV；MambaPool 保存状态",
    "one spec per KV cache group: MLAAttentionSpec, MambaSpec":
        "每个 KV 缓存组一个 spec：MLAAttentionSpec, MambaSpec",
    "one uint8 buffer, two sub-pools growing from opposite ends":
        "一个 uint8 缓冲区，两个子池从两端相向增长",
    ("raises the attention block size until a page holds a state, pads the mamba page to equal ("
     "newer trees: Platform._align_hybrid_block_size)"):
        ("增大注意力块大小直到一页能容纳一个状态，并将 mamba 页填充至相同大小（较新的代码树：Platform._align"
         "_hybrid_block_size）"),
    "TreeNode.value (KV indices) and mamba_value (one slot or None); two LRU lists":
        "TreeNode.value（KV 索引）和 mamba_value（一个槽位或 None）；两个 LRU 列表",
    "block-hash cache instead of a tree; a state only in some blocks":
        "用块哈希缓存代替树；状态只存在于部分块中",
    "best_last_node, mamba_branching_seqlen (newer trees move this into _match_post_processor)":
        ("best_last_node, mamba_branching_seqlen（较新的代码树将其移入 _match_pos"
         "t_processor）"),
    "right to left: the last cached state block wins":
        "从右到左：最后一个缓存了状态的块胜出",
    ("new_node.mamba_value = None; evict_mamba tombstones internal nodes, _iteratively_delete_to"
     "mbstone_leaf"):
        ("new_node.mamba_value = None；evict_mamba 将内部节点标记为墓碑，_iterativ"
         "ely_delete_tombstone_leaf"),
    ("match_prefix copies with copy_from (COW); cache_unfinished_req forks (snapshot); cache_fin"
     "ished_req inserts the working slot or the kept ping-pong slot (donate)"):
        ("match_prefix 用 copy_from 复制（写时复制，COW）；cache_unfinished_req 执"
         "行 fork（快照）；cache_finished_req 插入工作槽位或保留的 ping-pong 槽位（donate"
         "）"),
    ("the tracked state is h at the cache boundary; _init_track_conv_indices gathers the conv wi"
     "ndow ending at the same position"):
        "被跟踪的状态是缓存边界处的 h；_init_track_conv_indices 收集在同一位置结束的 conv 窗口",
    ("returns whether a step's accepted tokens reach a block boundary, that boundary's offset in"
     " the run (accept_token_bias) and the destination block; _postprocess_replayssm_kernel (sam"
     "e file, read at commit 00b08dc4) plans the copy of exactly that boundary's state -- source"
     " and destination slot tables, ring start, flush count -- and FlashInfer's replayssm_materi"
     "alize (ReplaySSMModelContext.materialize) copies it"):
        ("返回某一步接受的 token 是否到达块边界、该边界在本次运行中的偏移（accept_token_bias）以及目标块；"
         "_postprocess_replayssm_kernel（同一文件，于 commit 00b08dc4 查阅）规划恰好"
         "该边界状态的复制——源和目标槽位表、环形缓冲起点、flush 计数——并由 FlashInfer 的 replayssm"
         "_materialize（ReplaySSMModelContext.materialize）执行复制"),
    ("tracked = prefix + (extend_len // chunk) * chunk, or mamba_branching_seqlen; prepare_for_d"
     "ecode tracks seq_lens % mamba_track_interval == 0"):
        ("tracked = prefix + (extend_len // chunk) * chunk，或 mamba_bra"
         "nching_seqlen；prepare_for_decode 在 seq_lens % mamba_track_in"
         "terval == 0 时跟踪"),
    "None = dense, 0 = reachable boundaries only, N > 0 = one state per segment of N tokens":
        "None = 稠密，0 = 仅可达边界，N > 0 = 每 N 个 token 的段一个状态",
    "mamba_track_interval: int = 256":
        "mamba_track_interval: int = 256",
    ("int8 temporal state, scale = amax over d_v of |S| / 127; conv windows kept in their dtype;"
     " opt-in --enable-int8-mamba-checkpoint"):
        ("int8 temporal 状态，scale = 沿 d_v 取 |S| 的 amax / 127；conv 窗口保持原"
         " dtype；需通过 --enable-int8-mamba-checkpoint 显式开启"),
    "a hit needs the last sliding_window_size tokens' SWA KV; older nodes may be SWA tombstones":
        "命中需要最近 sliding_window_size 个 token 的 SWA KV；较旧的节点可能是 SWA 墓碑",
    ("needs cdiv(window - 1, block_size) contiguous cached blocks; the blocks before them are nu"
     "ll"):
        "需要 cdiv(window - 1, block_size) 个连续的已缓存块；它们之前的块为 null",
    "SGLang matches token keys in a radix tree; it does not hash blocks to match":
        "SGLang 在基数树中匹配 token 键；它不通过对块做哈希来匹配",
    "hash of (parent hash, block tokens, extra keys); the hash unit can be finer than the block":
        "（父哈希、块内 token、额外键）的哈希；哈希单位可以比块更细",
    "walk the KV path, back off to the deepest node holding a state":
        "沿 KV 路径遍历，回退到持有状态的最深节点",
    "groups sorted full attention first; iterate until the hit length stops shrinking":
        "各组排序时全注意力在前；迭代直到命中长度不再缩短",
    "one state per radix node instead of one per block":
        "每个基数树节点一个状态，而不是每个块一个",
    "computed = [null_block] * i + [cached]":
        "computed = [null_block] * i + [cached]",
    "mamba_branching_seqlen: the branching point is checkpointed during the coming prefill":
        "mamba_branching_seqlen：分支点会在接下来的 prefill 中做 checkpoint",
    ("align mode: a partial entry at the prompt's last hash boundary; consumers get a cow_block "
     "(FullAttentionManager has the KV-side twin)"):
        ("align 模式：在 prompt 最后一个哈希边界处的部分条目；使用方获得一个 cow_block（FullAtten"
         "tionManager 有 KV 侧的对应实现）"),
    "auto | no_buffer | extra_buffer | extra_buffer_lazy (older name: mamba_scheduler_strategy)":
        ("auto | no_buffer | extra_buffer | extra_buffer_lazy（旧名：mamba"
         "_scheduler_strategy）"),
    "align chunks to block_size; force the chunk that ends on the last cacheable position":
        "将分块对齐到 block_size；强制让某个分块恰好结束于最后一个可缓存位置",
    "mamba_max_states_per_path: a per-path cap instead of an interval":
        "mamba_max_states_per_path：按路径设上限，而不是按间隔",
    ("reachable boundaries from cache_blocks: num_prompt_tokens - 1 and request.shared_prefix_bo"
     "undary"):
        ("来自 cache_blocks 的可达边界：num_prompt_tokens - 1 和 request.shared"
         "_prefix_boundary"),
    "mamba LRU: internal nodes tombstoned, leaves deleted":
        "mamba LRU：内部节点标记为墓碑，叶子节点直接删除",
    "popleft from the free queue (LRU), then _maybe_evict_cached_block drops the hash":
        "从空闲队列（LRU）popleft，然后 _maybe_evict_cached_block 丢弃哈希",
    "SGLang PRs #17898 and #21862 proposed it; both closed unmerged":
        "SGLang PR #17898 和 #21862 曾提出该方案；均未合并即关闭",
    "vLLM took Marconi's admission side (retain reachable junctions); eviction stays LRU":
        "vLLM 采用了 Marconi 的准入一侧（保留可达的分叉点）；驱逐仍为 LRU",
    ("Marconi's own simulator (github.com/ruipeterpan/marconi); the repository could not be read"
     " here, the rule follows the Marconi paper (MLSys 2025)"):
        ("Marconi 自己的模拟器（github.com/ruipeterpan/marconi）；此处无法读取该仓库，规则依"
         "据 Marconi 论文（MLSys 2025）"),
    "SGLang PR #21862 (closed, unmerged) carried a tuner":
        "SGLang PR #21862（已关闭，未合并）包含一个调优器",
    ("Marconi's own simulator; the repository could not be read here, the procedure follows the "
     "Marconi paper"):
        "Marconi 自己的模拟器；此处无法读取该仓库，流程依据 Marconi 论文",
    "one tracked state per 256 decoded tokens":
        "每 256 个 decode 出的 token 一个被跟踪的状态",
    ("'all' caches every block, 'align' only at step ends; prefix_cache_retention_interval defau"
     "lts to 0"):
        ("'all' 缓存每个块，'align' 仅在 step 结束时缓存；prefix_cache_retention_int"
         "erval 默认为 0"),
    ("a streaming /generate response runs tokenizer_manager.create_abort_task(obj) in the backgr"
     "ound: a client that left is aborted"):
        ("流式 /generate 响应在后台运行 tokenizer_manager.create_abort_task(obj"
         ")：已离开的客户端会被中止"),
    ("on asyncio.CancelledError / GeneratorExit (the client disconnected): await self.abort(requ"
     "est_id)"):
        ("遇到 asyncio.CancelledError / GeneratorExit（客户端断开连接）时：await se"
         "lf.abort(request_id)"),
    "POST /v1/completions; launch_server adds add_api_key_middleware when --api-key is set":
        ("POST /v1/completions；launch_server 会添加 add_api_key_middlewar"
         "e（当设置了 --api-key 时）"),
    ("vllm:num_requests_running, vllm:time_to_first_token_seconds, vllm:gpu_prefix_cache_hits at"
     " this commit (vLLM 0.34.0: vllm:prefix_cache_hits, vllm:inter_token_latency_seconds)"):
        ("vllm:num_requests_running, vllm:time_to_first_token_seconds,"
         " vllm:gpu_prefix_cache_hits（此 commit 中；vLLM 0.34.0：vllm:pref"
         "ix_cache_hits, vllm:inter_token_latency_seconds）"),
    "SGLang calls fla's chunk_kda (kda.chunk_form); it has no intra-chunk code of its own":
        "SGLang 调用 fla 的 chunk_kda（见 kda.chunk_form），没有自己的块内计算代码",
    "vLLM vendors fla's kernels (kda.chunk_form); none of its own":
        "vLLM 内置了 fla 的 kernel（见 kda.chunk_form），没有自己的实现",
    ("BC = 16: chunk_kda_fwd_intra_token_parallel for the diagonal blocks (fp32 Akk_diag), then "
     "chunk_kda_fwd_kernel_inter_solve_fused: off-diagonal blocks anchored at g of the row sub-chunk's "
     "first token, forward substitution, merged inverse"):
        ("BC = 16：先用 chunk_kda_fwd_intra_token_parallel 计算对角块（fp32 的 Akk_diag），再由 "
         "chunk_kda_fwd_kernel_inter_solve_fused 计算非对角块（以行子块第一个 token 的 g 为锚点）、做前向代入并合并逆矩阵"),
    ("per chunk of tokens: moe_align_block_size(topk_ids, BLOCK_SIZE_M, E), then invoke_fused_moe_kernel "
     "over the sorted rows, twice"):
        "按 token 分段：先 moe_align_block_size(topk_ids, BLOCK_SIZE_M, E)，再对排好序的行调用两次 invoke_fused_moe_kernel",
    "sorted_token_ids by allocated expert, padded to block_size; expert_ids per block":
        "sorted_token_ids 按分配到的专家排序并补齐到 block_size；expert_ids 给出每个块对应的专家",
    ("V padded up to the query head dim for zentorch_sdpa; cpu_sdpa.py @6d7a5bb7 "
     "CPUSDPAMLAPrefillBackend._ragged_sdpa loops over requests with matmul, masked_fill and softmax"):
        ("为 zentorch_sdpa 把 V 补齐到 query 的头维度；cpu_sdpa.py @6d7a5bb7 中的 "
         "CPUSDPAMLAPrefillBackend._ragged_sdpa 逐请求用 matmul、masked_fill 和 softmax 计算"),
}
