// Calls a model routed to the other provider with an official SDK: plain, streamed, and a
// tool round trip (plain and streamed), printing one JSON line per step.
// Usage: node translate.cjs openai|anthropic|responses BASE_URL MODEL
const [flavor, baseURL, model] = process.argv.slice(2);
const out = (o) => console.log(JSON.stringify(o));

const weatherParams = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };

async function openaiSteps(client) {
  const base = { model, max_tokens: 64, temperature: 0.5, top_p: 0.9, stop: ["\n\n"], user: "agent-7",
    messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Say hello" }] };
  const plain = await client.chat.completions.create(base);
  out({ step: "plain", text: plain.choices[0].message.content, finish: plain.choices[0].finish_reason,
    usage: plain.usage.total_tokens, object: plain.object });

  const stream = await client.chat.completions.create({ ...base, stream: true, stream_options: { include_usage: true } });
  let text = "", chunks = 0, finish = null, usage = null;
  for await (const c of stream) {
    chunks++;
    if (c.choices.length) { text += c.choices[0].delta.content ?? ""; finish = c.choices[0].finish_reason ?? finish; }
    if (c.usage) usage = c.usage.total_tokens;
  }
  out({ step: "stream", text, chunks, finish, usage });

  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: weatherParams } }];
  const ask = { model, max_tokens: 64, tools, messages: [{ role: "user", content: "Weather in Paris?" }] };
  const first = await client.chat.completions.create(ask);
  const msg = first.choices[0].message;
  const call = msg.tool_calls[0];
  const answer = [...ask.messages, msg, { role: "tool", tool_call_id: call.id, content: "sunny, 21C" }];
  const second = await client.chat.completions.create({ ...ask, messages: answer });
  out({ step: "tools", finish1: first.choices[0].finish_reason, name: call.function.name, args: JSON.parse(call.function.arguments),
    text: second.choices[0].message.content, finish2: second.choices[0].finish_reason });

  const s1 = client.chat.completions.stream({ ...ask });
  const f1 = await s1.finalChatCompletion();
  const m1 = f1.choices[0].message;
  const c1 = m1.tool_calls[0];
  const s2 = client.chat.completions.stream({ ...ask, messages: [...ask.messages, m1, { role: "tool", tool_call_id: c1.id, content: "rainy" }] });
  const f2 = await s2.finalChatCompletion();
  out({ step: "tools-stream", finish1: f1.choices[0].finish_reason, name: c1.function.name, args: JSON.parse(c1.function.arguments),
    text: f2.choices[0].message.content, finish2: f2.choices[0].finish_reason });

  try {
    await client.chat.completions.create({ ...base, n: 2 });
    out({ step: "refuse", ok: true });
  } catch (err) {
    out({ step: "refuse", ok: false, status: err.status, param: err.param ?? null, type: err.type ?? null, message: String(err.message) });
  }
}

async function anthropicSteps(client) {
  const base = { model, max_tokens: 64, temperature: 0.5, top_p: 0.9, stop_sequences: ["\n\n"], system: "Be brief.",
    metadata: { user_id: "agent-7" }, messages: [{ role: "user", content: "Say hello" }] };
  const plain = await client.messages.create(base);
  out({ step: "plain", text: plain.content[0].text, finish: plain.stop_reason, usage: plain.usage.input_tokens + plain.usage.output_tokens, object: plain.type });

  const stream = client.messages.stream(base);
  let chunks = 0;
  stream.on("text", () => chunks++);
  const final = await stream.finalMessage();
  out({ step: "stream", text: final.content[0].text, chunks, finish: final.stop_reason, usage: final.usage.input_tokens + final.usage.output_tokens });

  const tools = [{ name: "get_weather", description: "Weather of a city", input_schema: weatherParams }];
  const ask = { model, max_tokens: 64, tools, messages: [{ role: "user", content: "Weather in Paris?" }] };
  const first = await client.messages.create(ask);
  const use = first.content.find((b) => b.type === "tool_use");
  const answer = [...ask.messages, { role: "assistant", content: first.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny, 21C" }] }];
  const second = await client.messages.create({ ...ask, messages: answer });
  out({ step: "tools", finish1: first.stop_reason, name: use.name, args: use.input, text: second.content[0].text, finish2: second.stop_reason });

  const f1 = await client.messages.stream(ask).finalMessage();
  const u1 = f1.content.find((b) => b.type === "tool_use");
  const f2 = await client.messages.stream({ ...ask, messages: [...ask.messages, { role: "assistant", content: f1.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: u1.id, content: "rainy" }] }] }).finalMessage();
  out({ step: "tools-stream", finish1: f1.stop_reason, name: u1.name, args: u1.input, text: f2.content[0].text, finish2: f2.stop_reason });

  try {
    await client.messages.create({ ...base, top_k: 5 });
    out({ step: "refuse", ok: true });
  } catch (err) {
    out({ step: "refuse", ok: false, status: err.status, param: null, type: err.error?.error?.type ?? null, message: String(err.message) });
  }
}

async function responsesSteps(client) {
  const base = { model, max_output_tokens: 64, instructions: "Be brief.", input: "Say hello" };
  const plain = await client.responses.create(base);
  out({ step: "plain", text: plain.output_text, finish: plain.status, usage: plain.usage.total_tokens, object: plain.object });

  const stream = client.responses.stream(base);
  let chunks = 0;
  stream.on("response.output_text.delta", () => chunks++);
  const final = await stream.finalResponse();
  out({ step: "stream", text: final.output_text, chunks, finish: final.status, usage: final.usage.total_tokens });

  const tools = [{ type: "function", name: "get_weather", description: "Weather of a city", parameters: weatherParams, strict: false }];
  const ask = { model, max_output_tokens: 64, tools, input: [{ role: "user", content: "Weather in Paris?" }] };
  const first = await client.responses.create(ask);
  const call = first.output.find((i) => i.type === "function_call");
  const second = await client.responses.create({ ...ask, input: [...ask.input,
    { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
    { type: "function_call_output", call_id: call.call_id, output: "sunny, 21C" }] });
  out({ step: "tools", finish1: first.status, name: call.name, args: JSON.parse(call.arguments), text: second.output_text, finish2: second.status });

  const f1 = await client.responses.stream(ask).finalResponse();
  const c1 = f1.output.find((i) => i.type === "function_call");
  const f2 = await client.responses.stream({ ...ask, input: [...ask.input,
    { type: "function_call", call_id: c1.call_id, name: c1.name, arguments: c1.arguments },
    { type: "function_call_output", call_id: c1.call_id, output: "rainy" }] }).finalResponse();
  out({ step: "tools-stream", finish1: f1.status, name: c1.name, args: JSON.parse(c1.arguments), text: f2.output_text, finish2: f2.status });

  try {
    await client.responses.create({ ...base, previous_response_id: "resp_123" });
    out({ step: "refuse", ok: true });
  } catch (err) {
    out({ step: "refuse", ok: false, status: err.status, param: err.param ?? null, type: err.type ?? null, message: String(err.message) });
  }
}

async function main() {
  if (flavor === "anthropic") {
    const Anthropic = require("@anthropic-ai/sdk").default ?? require("@anthropic-ai/sdk");
    await anthropicSteps(new Anthropic({ baseURL, apiKey: "caller-key", maxRetries: 0 }));
    return;
  }
  const OpenAI = require("openai").default ?? require("openai");
  const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "caller-key", maxRetries: 0 });
  await (flavor === "openai" ? openaiSteps(client) : responsesSteps(client));
}

main().catch((err) => { console.error(err); process.exit(1); });
