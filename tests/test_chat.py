"""The RAGEN chat format: lenient reply parsing (one test per malformed-reply class) and page rendering.

Parsing tests need nothing; rendering tests use real env observations from the synthetic catalog (always
available) and, where present, the real 1k-product data.
"""

import time
from dataclasses import asdict

import pytest

from apo_lightning.rollout.chat import (
    EMPTY_REPLY,
    NO_ACTION_IN_ANSWER,
    NO_ANSWER_TAG,
    ChatFormat,
    cut_middle,
    observation_lines,
    parse_reply,
    render_actions,
    render_page,
)
from apo_lightning.baselines.scripted import OraclePolicy
from apo_lightning.utils.hashing import cache_key
from apo_lightning.webshop import WebShop, WebShopEnv


# ------------------------------------------------------------------------------------------------ parse_reply
def test_well_formed_reply():
    parsed = parse_reply("<think>The red ones match.</think><answer>click[B07HRFSNL4]</answer>")
    assert (parsed.thought, parsed.action, parsed.error, parsed.num_actions) == (
        "The red ones match.", "click[B07HRFSNL4]", None, 1)


@pytest.mark.parametrize("reply", ["I would buy the red running shoes.", "search[red shoes]", "click[buy now]"])
def test_no_tags_at_all(reply):
    parsed = parse_reply(reply)
    assert parsed.action is None and parsed.error == NO_ANSWER_TAG and parsed.num_actions == 0
    assert parsed.thought == reply  # without tags, everything is thought


@pytest.mark.parametrize("reply", ["", " ", "\n\n", " \t\r\n "])
def test_empty_or_whitespace_reply(reply):
    assert parse_reply(reply) == parse_reply("")
    parsed = parse_reply(reply)
    assert (parsed.thought, parsed.action, parsed.error, parsed.num_actions) == ("", None, EMPTY_REPLY, 0)


def test_unclosed_answer_still_gives_the_action():
    # a reply cut by the token limit right after the action
    parsed = parse_reply("<think>It matches.</think><answer>click[buy now]")
    assert parsed.action == "click[buy now]" and parsed.error is None and parsed.thought == "It matches."
    assert parse_reply("<answer>search[red shoes]   ").action == "search[red shoes]"
    # ... but not a half-written action
    cut = parse_reply("<think>ok</think><answer>search[red sho")
    assert cut.action is None and cut.error == NO_ACTION_IN_ANSWER


def test_unclosed_think():
    parsed = parse_reply("<think>I should search for red shoes first")
    assert parsed.action is None and parsed.error == NO_ANSWER_TAG
    assert parsed.thought == "I should search for red shoes first"
    # an answer after an unclosed think is still taken
    parsed = parse_reply("<think>search first<answer>search[red shoes]</answer>")
    assert parsed.action == "search[red shoes]" and parsed.error is None


def test_unclosed_think_thought_stops_at_the_answer():
    assert parse_reply("<think>search first<answer>search[red shoes]</answer>").thought == "search first"


def test_overlong_reply():
    junk = "lorem ipsum [dolor] sit amet " * 350  # ~10k characters, brackets included
    parsed = parse_reply(junk + "<answer>search[red shoes]</answer>")
    assert parsed.action == "search[red shoes]" and parsed.error is None
    assert parse_reply(junk).error == NO_ANSWER_TAG
    assert parse_reply("<answer>" + junk).error == NO_ACTION_IN_ANSWER
    # no pathological backtracking on long bracket- and keyword-heavy replies
    start = time.perf_counter()
    for reply in ("<answer>" + "search[ click" * 10_000, "<think>" * 10_000, "<answer>search[" + "x " * 50_000):
        assert parse_reply(reply).action is None
    assert time.perf_counter() - start < 2.0


def test_non_ascii_junk():
    reply = "🙂👟 购物车 \x00\x07\x1b[31m <think>想要红色的</think> ☃ <answer>search[红色 运动鞋 👟]</answer> ✓"
    parsed = parse_reply(reply)
    assert parsed.action == "search[红色 运动鞋 👟]" and parsed.thought == "想要红色的"
    # control characters around the argument are stripped like whitespace; inside it they stay
    assert parse_reply("<answer>\x00click[\tbuy now\x0b]</answer>").action == "click[buy now]"
    assert parse_reply("<answer>click[a\x07b]</answer>").action == "click[a\x07b]"
    assert parse_reply("🙂" * 500 + "\x00\x01 ¿qué?").error == NO_ANSWER_TAG
    assert parse_reply("<answer>🙂 购物 \x1b[0m</answer>").error == NO_ACTION_IN_ANSWER


def test_several_actions_take_the_first_and_count_them():
    parsed = parse_reply("<answer>search[red shoes] click[B07HRFSNL4] click[buy now]</answer>")
    assert parsed.action == "search[red shoes]" and parsed.num_actions == 3 and parsed.error is None
    # only the first answer counts
    assert parse_reply("<answer></answer><answer>click[buy now]</answer>").error == NO_ACTION_IN_ANSWER


def test_upper_case_tags_and_names():
    parsed = parse_reply("<THINK>Done.</Think><ANSWER>Click[Buy Now]</ANSWER>")
    assert parsed.action == "click[Buy Now]" and parsed.thought == "Done."
    assert parse_reply("<Answer>SEARCH [Red Shoes]</aNsWeR>").action == "search[Red Shoes]"


def test_upper_case_action_is_accepted_by_the_env(item_pages):
    env, _ = item_pages
    assert env.step(parse_reply("<ANSWER>Click[Buy Now]</ANSWER>").action)[3]["valid"]


@pytest.mark.parametrize("answer", ["click[foo [bar] baz]", "click[[buy now]]", "search[shoes [red]]"])
def test_nested_brackets_are_not_an_action(answer):
    parsed = parse_reply(f"<answer>{answer}</answer>")
    assert parsed.action is None and parsed.error == NO_ACTION_IN_ANSWER


def test_first_well_formed_action_after_a_nested_one():
    parsed = parse_reply("<answer>click[a [b]] click[buy now]</answer>")
    assert parsed.action == "click[buy now]" and parsed.num_actions == 1


@pytest.mark.parametrize("reply", [
    "click[buy now] <answer></answer>",
    "<think>click[buy now]</think><answer>I am not sure</answer>",
    "<answer>I am not sure</answer> click[buy now]",
])
def test_action_outside_the_answer_is_not_taken(reply):
    parsed = parse_reply(reply)
    assert parsed.action is None and parsed.error == NO_ACTION_IN_ANSWER


def test_action_outside_the_answer_without_answer_tag():
    parsed = parse_reply("<think>ok</think>click[buy now]")
    assert parsed.action is None and parsed.error == NO_ANSWER_TAG


def test_newline_inside_brackets():
    parsed = parse_reply("<answer>search[red\nshoes]</answer>")
    assert parsed.action is None and parsed.error == NO_ACTION_IN_ANSWER
    assert parse_reply("<answer>search[red\nshoes] click[buy now]</answer>").action == "click[buy now]"
    # a newline around the action is fine
    assert parse_reply("<answer>\nsearch[red shoes]\n</answer>").action == "search[red shoes]"


def test_argument_and_name_spacing():
    assert parse_reply("<answer>search [  red shoes  ]</answer>").action == "search[red shoes]"
    # the name must be a word of its own
    assert parse_reply("<answer>research[red shoes]</answer>").error == NO_ACTION_IN_ANSWER
    assert parse_reply("<answer>click[   ]</answer>").action == "click[]"  # whitespace-only argument: env refuses it


# ------------------------------------------------------------------------------------------------ pages
@pytest.fixture(scope="module")
def shop():
    return WebShop.load(None)  # the synthetic catalog (generated under data/synthetic/seed0 on first use)


def oracle_pages(shop, goal_index=0, observation_mode="text"):
    """Walk the oracle until its first option click: [(observation, available_actions, action taken), ...]."""
    env = WebShopEnv(shop, observation_mode, max_steps=15)
    observation = env.reset(goal_index)
    oracle = OraclePolicy()
    oracle.reset(env.goal)
    pages = []
    while True:
        available = env.available_actions()
        action = oracle.act(observation, available)
        pages.append((observation, available, action))
        if env.page.kind == "item_page":
            break
        observation, _, done, _ = env.step(action)
        assert not done
    observation, _, _, _ = env.step(action)  # an option click: text mode shows the same page again
    pages.append((observation, env.available_actions(), None))
    return env, pages


@pytest.fixture(scope="module")
def pages(shop):
    env, pages = oracle_pages(shop, goal_index=0)
    kinds = [p[0].split(" [SEP] ")[0] for p in pages]
    assert len(pages) == 4, kinds  # search page, results page, item page, item page after an option click
    return pages


@pytest.fixture
def item_pages(shop):
    return oracle_pages(shop, goal_index=0)


def test_search_page(shop, pages):
    observation, available, _ = pages[0]
    instruction = shop.goals[0]["instruction_text"]
    assert instruction in observation
    assert observation_lines(observation) == ["Search"]
    assert render_page(observation, available) == "Search"  # 'search' is not clickable, so never bracketed
    assert render_actions(available) == "search[<query>]"


def bracketed(page):
    return [line[1:-1] for line in page.split("\n") if line.startswith("[") and line.endswith("]")]


def test_results_page(shop, pages):
    observation, available, _ = pages[1]
    page = render_page(observation, available)
    lines = page.split("\n")
    assert shop.goals[0]["instruction_text"] not in page and "Instruction:" not in page
    assert lines[0] == "[Back to Search]" and lines[1].startswith("Page 1 (Total results: ") and lines[2] == "[Next >]"
    assert {b.lower() for b in bracketed(page)} == set(available["clickables"])
    asins = [c for c in available["clickables"] if c not in ("back to search", "next >", "< prev")]
    assert len(asins) == 10
    for asin in asins:  # the ASIN as shown (upper case), then its title and price unbracketed
        i = lines.index(f"[{asin.upper()}]")
        assert not lines[i + 1].startswith("[") and lines[i + 2].startswith("$")
    assert render_actions(available) == "click[<an item in brackets>]"


def test_item_page(shop, pages):
    observation, available, action = pages[2]
    page = render_page(observation, available)
    assert shop.goals[0]["instruction_text"] not in page
    assert {b.lower() for b in bracketed(page)} == set(available["clickables"])
    for button in ("[Back to Search]", "[< Prev]", "[Description]", "[Features]", "[Reviews]", "[Buy Now]"):
        assert button in page.split("\n")
    assert action.startswith("click[") and f"[{action[6:-1]}]" in page.split("\n")  # the option the oracle picks
    assert render_actions(available) == "click[<an item in brackets>]"
    assert render_actions({"has_search_bar": False, "clickables": []}) == "none"
    assert render_actions({"has_search_bar": True, "clickables": ["search", "back to search"]}) == (
        "search[<query>] or click[<an item in brackets>]")


def test_turn_message(pages):
    chat = ChatFormat()
    observation, available, _ = pages[1]
    message = chat.turn_message(2, 14, observation, available, previous_observation=pages[0][0],
                                last_action=pages[0][2])
    assert message == f"Turn 2 (14 actions left):\n{render_page(observation, available)}\nActions: " \
                      "click[<an item in brackets>]"
    assert chat.turn_message(2, None, observation, available).startswith("Turn 2:\n")


def test_repeat_pages_short_and_full(pages):
    (item, available, option_click), (again, available_again, _) = pages[2], pages[3]
    assert again == item  # text mode does not show the clicked option
    short = ChatFormat(repeat_pages="short").turn_message(4, 12, again, available_again, item, option_click)
    assert short == f"Turn 4 (12 actions left):\n(the same page as before; you did {option_click})\n" \
                    "Actions: click[<an item in brackets>]"
    assert "\n" not in short.split("\n", 1)[1].rsplit("\nActions:", 1)[0]  # the page is one line
    assert "(the same page as before)\n" in ChatFormat().turn_message(4, 12, again, available_again, item, None)
    full = ChatFormat(repeat_pages="full").turn_message(4, 12, again, available_again, item, option_click)
    assert full == f"Turn 4 (12 actions left):\n{render_page(again, available_again)}\n" \
                   "Actions: click[<an item in brackets>]"
    # a different page is never shortened
    results, results_available, _ = pages[1]
    assert ChatFormat().turn_message(3, 13, item, available, results, "click[x]") == \
        ChatFormat(repeat_pages="full").turn_message(3, 13, item, available, results, "click[x]")


def test_max_observation_chars_cuts_the_page(pages):
    observation, available, _ = pages[1]
    message = ChatFormat(max_observation_chars=200).turn_message(2, 14, observation, available)
    page = message.split("\n", 1)[1].rsplit("\nActions:", 1)[0]
    full = render_page(observation, available)
    assert len(full) > 200 and len(page) == 200 and "…" in page
    assert page.startswith(full[:99]) and page.endswith(full[-100:])


def test_text_rich_observations_drop_the_instruction(shop):
    env, pages = oracle_pages(shop, goal_index=0, observation_mode="text_rich")
    instruction = shop.goals[0]["instruction_text"]
    for observation, available, _ in pages:
        lines = observation_lines(observation)
        assert lines and instruction not in lines and "Instruction:" not in lines and "WebShop" not in lines


def test_text_rich_page_marks_clickables_compactly(shop):
    env, pages = oracle_pages(shop, goal_index=0, observation_mode="text_rich")
    observation, available, _ = pages[1]
    page = render_page(observation, available)
    assert "[Next >]" in page.split("\n") and "[button]" not in page


def test_real_data_pages(real_data_dir):
    shop = WebShop.load(real_data_dir)
    env, pages = oracle_pages(shop, goal_index=0)
    instruction = shop.goals[0]["instruction_text"]
    assert render_page(*pages[0][:2]) == "Search"
    for observation, available, _ in pages[1:3]:
        page = render_page(observation, available)
        assert instruction not in page
        assert {b.lower() for b in bracketed(page)} == set(available["clickables"])


# ------------------------------------------------------------------------------------------------ ChatFormat
@pytest.mark.parametrize("kwargs, match", [
    (dict(repeat_pages="none"), "repeat_pages"),
    (dict(context_budget=63), "context_budget"),
    (dict(rebuild_fill=0.0), "rebuild_fill"),
    (dict(rebuild_fill=1.5), "rebuild_fill"),
])
def test_chat_format_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ChatFormat(**kwargs)


def test_chat_format_edge_values_are_valid():
    ChatFormat(context_budget=64, repeat_pages="full")


def test_negative_max_observation_chars_is_rejected():
    with pytest.raises(ValueError, match="max_observation_chars"):
        ChatFormat(max_observation_chars=-1)


def test_messages_put_the_task_before_the_first_listed_turn():
    chat = ChatFormat(system_prompt="SYS", task_prompt="Task: {instruction}")
    messages = chat.messages("buy socks", [("Turn 1", "r1"), ("Turn 2", None)])
    assert messages == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "Task: buy socks\n\nTurn 1"},
        {"role": "assistant", "content": "r1"},
        {"role": "user", "content": "Turn 2"},
    ]
    assert chat.task_message("buy socks") == "Task: buy socks"


# ------------------------------------------------------------------------------------------------ cut_middle
def test_cut_middle():
    text = "abcdefghijklmnopqrstuvwxyz"
    assert cut_middle(text, 26) == text and cut_middle(text, 100) == text and cut_middle("", 0) == ""
    assert cut_middle(text, 11) == "abcde…vwxyz"
    assert cut_middle(text, 10) == "abcd…vwxyz"  # the odd character goes to the tail
    assert cut_middle(text, 2) == "…z" and cut_middle(text, 1) == "…"
    for n in range(1, 30):
        cut = cut_middle(text, n)
        assert len(cut) == min(n, len(text))
        if n < len(text):
            head = (n - 1) // 2
            assert cut == text[:head] + "…" + text[len(text) - (n - 1 - head):]


def test_cut_middle_to_zero():
    assert len(cut_middle("abc", 0)) == 0


def test_cache_key_parts_hold_every_setting():
    assert ChatFormat().key_parts() == {**ChatFormat(context_budget=2048).key_parts(), "context_budget": 4096}
    assert ChatFormat().key_parts() == asdict(ChatFormat())
    assert cache_key(ChatFormat(rebuild_fill=0.5).key_parts()) != cache_key(ChatFormat().key_parts())
    # the parts of the default format in the V* and demonstration keys (a change re-keys both caches)
    assert cache_key(ChatFormat().key_parts()) == "0ea2aea95a41ccb72d4c8e750900fc3554adf38f666a5a9ceb7938142c265cdd"


def test_a_setting_out_of_range_is_named_as_its_key_with_its_value():
    with pytest.raises(ValueError) as raised:
        ChatFormat(context_budget=10)
    assert str(raised.value) == "chat.context_budget must be >= 64 (tokens), got 10"
