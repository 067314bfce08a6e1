"""Drive Open WebUI in Debian's headless Chromium like a person: sign in, choose the model, send a prompt, read the
answer as rendered, save a screenshot. Prints one JSON object (the test asserts on it).

Runs in the webui test tools' own virtualenv (Playwright; `make test-webui` creates it), not in the project's:
    python webui_browser.py --url http://HOST:PORT --email E --model M --prompt P --screenshot FILE
The password comes from the environment (WEBUI_TEST_PASSWORD), never from the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
# A closed network: no background connections, no component updates, no QUIC (see the machine notes).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# The newest chat of the signed-in user, as Open WebUI's API returns it: model and assistant message contents.
STORED_CHAT_JS = """
async () => {
  const headers = {Authorization: `Bearer ${localStorage.token}`};
  const chats = await (await fetch('/api/v1/chats/', {headers})).json();
  const chat = await (await fetch(`/api/v1/chats/${chats[0].id}`, {headers})).json();
  const messages = Object.values(chat.chat.history.messages);
  return {
    models: chat.chat.models,
    assistant: messages.filter(m => m.role === 'assistant').map(m => m.content),
    user: messages.filter(m => m.role === 'user').map(m => m.content),
  };
}
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--email", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--screenshot", required=True)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the answer")
    args = parser.parse_args()
    password = os.environ["WEBUI_TEST_PASSWORD"]
    result: dict = {"steps": []}
    started = time.monotonic()

    def step(name):
        result["steps"].append({"step": name, "at": round(time.monotonic() - started, 1)})

    with tempfile.TemporaryDirectory(prefix="webui-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 900},
        )
        page = context.pages[0] if context.pages else context.new_page()
        page.set_default_timeout(120_000)
        # What went wrong in the page, for the test's failure message: script errors, console errors, failed requests.
        problems = result.setdefault("problems", [])
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on("console", lambda msg: msg.type == "error" and problems.append(f"console: {msg.text}"))
        page.on(
            "response",
            lambda response: response.status >= 400 and problems.append(f"HTTP {response.status} {response.url}"),
        )
        try:
            page.goto(args.url + "/auth", wait_until="domcontentloaded")
            page.locator("input[type=email]").fill(args.email)
            page.locator("input[type=password]").fill(password)
            page.locator("button[type=submit]").click()
            page.locator("#chat-input").wait_for(state="visible")
            step("signed in")

            # The release notes pop up over the page at a user's first sign-in, whenever the app gets to them:
            # Playwright closes them before any action they would block.
            page.add_locator_handler(
                page.get_by_role("button", name="Okay, Let's Go!"), lambda notes: notes.click(), no_wait_after=True
            )

            # Choose the cluster's model in the model selector.
            page.locator("#model-selector-model-button").click()
            page.get_by_role("option", name=f"Select {args.model} model").click()
            result["selected_model"] = page.locator("#model-selector-model-button").get_attribute("aria-label")
            step("model chosen")

            page.locator("#chat-input").click()
            page.keyboard.type(args.prompt)
            page.keyboard.press("Enter")
            step("prompt sent")

            # The answer is rendered once generation is done: the response's action buttons appear under it.
            page.locator("#continue-response-button").last.wait_for(state="visible", timeout=args.timeout * 1000)
            result["user_message"] = page.locator(".user-message").last.inner_text().strip()
            result["answer_model"] = page.locator("#response-message-model-name").last.inner_text().strip()
            result["answer"] = page.locator("#response-content-container").last.inner_text().strip()
            step("answer rendered")

            # What Open WebUI stored for that chat (the coordinator's raw completion), read with the session's token.
            result["stored"] = page.evaluate(STORED_CHAT_JS)
        finally:
            page.screenshot(path=args.screenshot, full_page=True)
            result["screenshot"] = args.screenshot
            result["final_url"] = page.url
            context.close()
            print(json.dumps({"final_url": result["final_url"], "problems": problems[-20:]}), file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
