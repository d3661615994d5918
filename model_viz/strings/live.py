"""UI strings of the page ``app_pages/live.py`` (namespace ``live.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    'live.nav': {"en": 'Live: watch a server', "zh": '实时：观察一个服务器'},
    'live.caption': {
        "en": 'attach to a running `kda-ref serve` and watch its batches, memory pool, radix tree or state blocks and queues as requests arrive.',
        "zh": '连接一个正在运行的 `kda-ref serve`，在请求到来时观察它的批次、内存池、基数树或状态块，以及队列。',
    },
    'live.title': {"en": 'Live: a running server, step by step', "zh": '实时：逐步观察运行中的服务器'},
    'live.intro': {
        "en": "Start a server (`kda-ref serve --prefix-cache radix`), point any OpenAI client or load generator at it (`kda-ref bench serve --url`, `curl`, the `openai` package), and connect here. The server records its steps while a reader (this page) is attached -- a server nobody watches builds no trace at all -- and keeps the last of them in a ring (`--trace-steps`, 256 by default); the page reads the steps it has not seen yet, once a second, and draws each with the Lab's views: the step's batch, the memory pool by page kind, the radix tree or the state blocks after each finished request, the running and waiting queues, and every request's time to first token (TTFT) and time per output token (TPOT) so far. **Pause** stops reading; the slider then steps back through the window. The window downloads as a JSONL trace (every page's upload box reads it) or a Chrome trace for Perfetto.",
        "zh": "先启动一个服务器（`kda-ref serve --prefix-cache radix`），用任意 OpenAI 客户端或压测工具向它发请求（`kda-ref bench serve --url`、`curl`、`openai` 包），再在这里连接。服务器只在有读者（本页）连接时记录它的步——没有人观察的服务器完全不构建 trace——并把最近的若干步保存在一个环形缓冲区里（`--trace-steps`，默认 256）；本页每秒读取一次尚未看到的步，并用实验台的视图绘制每一步：这一步的批次、按页类型划分的内存池、每个请求结束后的基数树或状态块、运行与等待队列，以及每个请求到目前为止的首 token 时延（TTFT）和每输出 token 时延（TPOT）。**暂停**后停止读取，此时可以用滑块在窗口内回看。窗口可以下载为 JSONL trace（每个页面的上传框都能读取）或用于 Perfetto 的 Chrome trace。",
    },
    'live.url_label': {"en": 'server URL', "zh": '服务器地址'},
    'live.key_label': {"en": 'API key (if the server has --api-key)', "zh": 'API 密钥（服务器设置了 --api-key 时）'},
    'live.connect': {"en": 'Connect', "zh": '连接'},
    'live.refresh': {"en": 'Read new steps now', "zh": '立即读取新步'},
    'live.pause': {"en": 'Pause (step back through the window)', "zh": '暂停（在窗口内回看）'},
    'live.not_connected': {
        "en": 'Not connected. Start `kda-ref serve`, enter its URL and press **Connect**.',
        "zh": '尚未连接。请启动 `kda-ref serve`，输入它的地址，然后点击**连接**。',
    },
    'live.no_steps': {
        "en": 'Connected; the server records steps from now on, while this page reads them, and none has run since. Send it a request.',
        "zh": '已连接；服务器从现在起、在本页读取期间记录它的步，此后还没有运行任何一步。请向它发送一个请求。',
    },
    'live.missed': {
        "en": '{n} steps ran while the page was not reading (the server records only while a reader is attached, and its ring keeps only the last steps): the window has a gap there.',
        "zh": '有 {n} 步在本页未读取时运行（服务器只在有读者连接时记录，且它的环形缓冲区只保留最近的若干步）：窗口在那里有一段空缺。',
    },
    'live.restarted': {
        "en": 'The server restarted (its steps count from 1 again): the window starts over.',
        "zh": '服务器已重启（它的步数重新从 1 开始计）：窗口重新开始。',
    },
    'live.window': {
        "en": 'window: steps {first}–{last} ({n} steps with a forward)',
        "zh": '窗口：第 {first}–{last} 步（其中 {n} 步运行了前向）',
    },
    'live.tab.batch': {"en": 'batch', "zh": '批次'},
    'live.tab.pool': {"en": 'memory pool', "zh": '内存池'},
    'live.tab.cache': {"en": 'prefix cache', "zh": '前缀缓存'},
    'live.tab.queues': {"en": 'queues and requests', "zh": '队列与请求'},
    'live.tab.download': {"en": 'download', "zh": '下载'},
    'live.queue.running': {"en": 'running', "zh": '运行中'},
    'live.queue.waiting': {"en": 'waiting', "zh": '等待中'},
    'live.queue.requests': {"en": 'requests', "zh": '请求数'},
    'live.col.request': {"en": 'request', "zh": '请求'},
    'live.col.prompt_len': {"en": 'prompt tokens', "zh": '提示词 token 数'},
    'live.col.output_len': {"en": 'output tokens so far', "zh": '已输出 token 数'},
    'live.col.ttft': {"en": 'TTFT (ms)', "zh": 'TTFT（毫秒）'},
    'live.col.tpot': {"en": 'TPOT (ms)', "zh": 'TPOT（毫秒）'},
    'live.col.state': {"en": 'state', "zh": '状态'},
    'live.state.done': {"en": 'ended', "zh": '已结束'},
    'live.state.running': {"en": 'in flight', "zh": '进行中'},
    'live.download_note': {
        "en": 'The window as read so far (at most 256 steps).',
        "zh": '到目前为止读取到的窗口（最多 256 步）。',
    },
    'live.err.url': {"en": '{url!r} is not an http(s)://host[:port] address', "zh": '{url!r} 不是 http(s)://主机[:端口] 形式的地址'},
    'live.err.http': {"en": 'the server answered {status}: {msg}', "zh": '服务器返回 {status}：{msg}'},
    'live.err.unreachable': {"en": 'cannot reach {url}: {msg}', "zh": '无法连接 {url}：{msg}'},
    'live.err.too_large': {"en": 'the server\'s answer is over {max_bytes:,} bytes', "zh": '服务器的回答超过 {max_bytes:,} 字节'},
    'live.err.not_kda': {
        "en": 'that server does not answer /kda/trace as kda-ref serve does (another kind of server)',
        "zh": '该服务器没有像 kda-ref serve 那样响应 /kda/trace（是别的服务器）',
    },
    'live.err.bad_event': {"en": 'step {step}: a malformed event ({msg})', "zh": '第 {step} 步：格式错误的事件（{msg}）'},
}
