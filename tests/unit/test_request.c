/* The request decoder (src/request/), the one reader of request fields for `invar batch` and
 * the OpenAI server: the same JSON gives the same tokens and sampling whichever kind decodes
 * it, and the fields the two used to read by different rules (content parts, ranges, seed,
 * top_k, parse_special, token-id prompts) follow one rule everywhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine_fixture.h"
#include "request/request.h"

static invar_model *g_model;

static int setup(void **state) {
    (void)state;
    g_model = fixture_model();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    invar_model_free(g_model);
    return 0;
}

static const req_kind KINDS[] = {REQ_BATCH, REQ_COMPLETION, REQ_CHAT};
static const char *const KIND_NAMES[] = {"batch", "completion", "chat"};

/* Decodes json as kind: 0 or -1, with *d / *e filled. */
static int decode(const char *json, req_kind kind, req_decoded *d, req_error *e) {
    bool trailing;
    cJSON *o = req_parse_json(json, strlen(json), &trailing);
    assert_non_null(o);
    int rc = req_decode(g_model, o, kind, d, e);
    cJSON_Delete(o);
    return rc;
}

static void expect_ok(const char *json, req_kind kind, req_decoded *d) {
    req_error e;
    if (decode(json, kind, d, &e)) fail_msg("%s as %s: %s", json, KIND_NAMES[kind], e.message);
}

/* json must fail with this error kind and param for each kind in the mask (bit k: KINDS[k]). */
static void expect_error(const char *json, unsigned kinds, req_error_kind want, const char *param,
                         const char *in_message) {
    for (int k = 0; k < 3; k++) {
        if (!(kinds >> k & 1)) continue;
        req_decoded d;
        req_error e;
        if (!decode(json, KINDS[k], &d, &e)) {
            req_decoded_free(&d);
            fail_msg("%s as %s: accepted", json, KIND_NAMES[k]);
        }
        if (e.kind != want || (param ? !e.param || strcmp(e.param, param) : e.param != NULL) ||
            (in_message && !strstr(e.message, in_message)))
            fail_msg("%s as %s: kind %d param %s message '%s'", json, KIND_NAMES[k], (int)e.kind,
                     e.param ? e.param : "(null)", e.message);
        assert_null(d.prompts); /* nothing left to free */
    }
}

#define PROMPT_KINDS 3u /* batch, completion */
#define CHAT_KINDS 5u   /* batch, chat */
#define ALL_KINDS 7u

static void assert_same_prompt(const req_prompt *a, const req_prompt *b) {
    assert_int_equal(a->n_ids, b->n_ids);
    assert_memory_equal(a->ids, b->ids, sizeof(int32_t) * (size_t)a->n_ids);
    assert_string_equal(a->text, b->text);
}

static void assert_same_sampling(const invar_sampling *a, const invar_sampling *b) {
    assert_int_equal(a->max_tokens, b->max_tokens);
    assert_true(a->temperature == b->temperature && a->top_p == b->top_p && a->min_p == b->min_p);
    assert_int_equal(a->top_k, b->top_k);
    assert_true(a->seed == b->seed);
    assert_int_equal(a->top_logprobs, b->top_logprobs);
    assert_int_equal(a->ignore_eos, b->ignore_eos);
    assert_int_equal(a->prompt_logprobs, b->prompt_logprobs);
}

static void test_batch_and_server_decode_alike(void **state) {
    (void)state;
    const char *raw = "{\"prompt\": \"<|im_start|>Hello\", \"max_tokens\": 7, \"temperature\": 0.5, \"top_p\": 0.9,"
                      " \"min_p\": 0.05, \"top_k\": 40, \"seed\": 9007199254740992, \"ignore_eos\": true,"
                      " \"logprobs\": 3}";
    req_decoded b, c;
    expect_ok(raw, REQ_BATCH, &b);
    expect_ok(raw, REQ_COMPLETION, &c);
    assert_int_equal(b.n_prompts, 1);
    assert_same_prompt(&b.prompts[0], &c.prompts[0]);
    assert_same_sampling(&b.samp, &c.samp);
    assert_true(b.max_tokens_given && b.logprobs && !b.chat);
    assert_int_equal(b.samp.max_tokens, 7);
    assert_int_equal(b.samp.top_k, 40);
    assert_true(b.samp.seed == 9007199254740992ull && b.samp.ignore_eos && b.samp.top_logprobs == 3);
    assert_int_equal(b.prompts[0].ids[b.prompts[0].n_ids - 2], 1); /* <|im_start|> parsed as one token */
    req_decoded_free(&b);
    req_decoded_free(&c);

    /* The same chat through batch and the chat endpoint. */
    const char *chat = "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                       " {\"role\": \"user\", \"content\": \"Name a colour.\"}], \"max_completion_tokens\": 5,"
                       " \"max_tokens\": 9, \"seed\": 4}";
    expect_ok(chat, REQ_BATCH, &b);
    expect_ok(chat, REQ_CHAT, &c);
    assert_true(b.chat && c.chat);
    assert_same_prompt(&b.prompts[0], &c.prompts[0]);
    assert_same_sampling(&b.samp, &c.samp);
    assert_int_equal(b.samp.max_tokens, 5); /* max_completion_tokens wins */
    /* The text is the chat as the template renders it. */
    invar_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Name a colour."}};
    char err[128];
    char *rendered = invar_chat_render(g_model, msgs, 2, true, err, sizeof err);
    assert_non_null(rendered);
    assert_string_equal(b.prompts[0].text, rendered);
    invar_free(rendered); /* the API's own free (for callers such as ctypes) */
    req_decoded_free(&b);
    req_decoded_free(&c);
}

static void test_defaults(void **state) {
    (void)state;
    invar_sampling def;
    invar_sampling_default(&def);
    for (int k = 0; k < 2; k++) {
        req_decoded d;
        expect_ok("{\"prompt\": \"x\", \"seed\": null}", KINDS[k], &d);
        assert_same_sampling(&d.samp, &def);
        assert_false(d.max_tokens_given || d.logprobs);
        req_decoded_free(&d);
    }
    req_decoded d;
    expect_ok("{\"prompt\": \"x\", \"top_k\": -1, \"logprobs\": 0, \"max_completion_tokens\": 3}", REQ_BATCH, &d);
    assert_int_equal(d.samp.top_k, 0);          /* -1 is off, as 0 */
    assert_true(d.logprobs && d.samp.top_logprobs == 0);
    assert_false(d.max_tokens_given);           /* max_completion_tokens goes with messages */
    req_decoded_free(&d);
}

/* Message content: a string, or text parts joined; never anything else. */
static void test_message_content(void **state) {
    (void)state;
    req_decoded s, p;
    expect_ok("{\"messages\": [{\"role\": \"user\", \"content\": \"Hello there\"}]}", REQ_CHAT, &s);
    for (int k = 0; k < 3; k += 2) {
        expect_ok("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hello\"},"
                  " {\"type\": \"text\", \"text\": \" there\"}]}]}",
                  KINDS[k], &p);
        assert_same_prompt(&s.prompts[0], &p.prompts[0]);
        req_decoded_free(&p);
    }
    req_decoded_free(&s);
    expect_error("{\"messages\": [{\"role\": \"user\"}]}", CHAT_KINDS, REQ_ERR_TYPE, "messages", "content");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": null}]}", CHAT_KINDS, REQ_ERR_TYPE, "messages",
                 "content");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", CHAT_KINDS, REQ_ERR_TYPE, "messages", NULL);
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}",
                 CHAT_KINDS, REQ_ERR_TYPE, "messages", "only text parts");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": [{\"text\": \"no type\"}]}]}", CHAT_KINDS,
                 REQ_ERR_TYPE, "messages", "only text parts");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": [\"bare\"]}]}", CHAT_KINDS, REQ_ERR_TYPE,
                 "messages", NULL);
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"},"
                 " {\"type\": \"text\", \"text\": \"b\", \"cache_control\": {}}]}]}",
                 CHAT_KINDS, REQ_ERR_UNSUPPORTED, "messages", "content[1]: unsupported key 'cache_control'");
    expect_error("{\"messages\": [{\"role\": 1, \"content\": \"x\"}]}", CHAT_KINDS, REQ_ERR_TYPE, "messages", "role");
    expect_error("{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", CHAT_KINDS, REQ_ERR_TEMPLATE,
                 "messages", "chat template");
    expect_error("{\"messages\": []}", CHAT_KINDS, REQ_ERR_TYPE, "messages", "non-empty");
    expect_error("{\"messages\": \"hi\"}", CHAT_KINDS, REQ_ERR_TYPE, "messages", "non-empty");
}

/* The sampling ranges: the server's (the stricter) for every kind. */
static void test_sampling_ranges(void **state) {
    (void)state;
    static const struct { const char *json, *param; req_error_kind kind; } bad[] = {
        {"{\"prompt\": \"x\", \"max_tokens\": 0}", "max_tokens", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"max_tokens\": -4}", "max_tokens", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"max_tokens\": 16777217}", "max_tokens", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"max_tokens\": 1.5}", "max_tokens", REQ_ERR_TYPE},
        {"{\"prompt\": \"x\", \"max_tokens\": \"ten\"}", "max_tokens", REQ_ERR_TYPE},
        {"{\"prompt\": \"x\", \"temperature\": -0.5}", "temperature", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"temperature\": 101}", "temperature", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"temperature\": \"hot\"}", "temperature", REQ_ERR_TYPE},
        {"{\"prompt\": \"x\", \"top_p\": 0}", "top_p", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"top_p\": 1.01}", "top_p", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"min_p\": -0.1}", "min_p", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"min_p\": 2}", "min_p", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"top_k\": -2}", "top_k", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"top_k\": 1073741825}", "top_k", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"seed\": -1}", "seed", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"seed\": 1e300}", "seed", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"seed\": 2.5}", "seed", REQ_ERR_TYPE},
        {"{\"prompt\": \"x\", \"ignore_eos\": 1}", "ignore_eos", REQ_ERR_TYPE},
        {"{\"prompt\": \"x\", \"logprobs\": 21}", "logprobs", REQ_ERR_VALUE},
        {"{\"prompt\": \"x\", \"logprobs\": true}", "logprobs", REQ_ERR_TYPE},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) expect_error(bad[i].json, PROMPT_KINDS, bad[i].kind, bad[i].param, NULL);
    /* The same fields in a chat request, for the chat endpoint too. */
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"seed\": -1}", ALL_KINDS & ~2u,
                 REQ_ERR_VALUE, "seed", NULL);
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_completion_tokens\": 0}",
                 ALL_KINDS & ~2u, REQ_ERR_VALUE, "max_completion_tokens", NULL);
    /* Chat's logprobs: a boolean, top_logprobs only with it. */
    const char *m = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], ";
    char buf[256];
    snprintf(buf, sizeof buf, "%s\"top_logprobs\": 2}", m);
    expect_error(buf, 4u, REQ_ERR_VALUE, "top_logprobs", "needs 'logprobs'");
    snprintf(buf, sizeof buf, "%s\"logprobs\": 2}", m);
    expect_error(buf, 4u, REQ_ERR_TYPE, "logprobs", NULL);
    snprintf(buf, sizeof buf, "%s\"logprobs\": true, \"top_logprobs\": 21}", m);
    expect_error(buf, 4u, REQ_ERR_VALUE, "top_logprobs", NULL);
    req_decoded d;
    snprintf(buf, sizeof buf, "%s\"logprobs\": true, \"top_logprobs\": 2}", m);
    expect_ok(buf, REQ_CHAT, &d);
    assert_true(d.logprobs && d.samp.top_logprobs == 2);
    req_decoded_free(&d);
}

/* The speculation extension fields, and the caller's defaults where a request gives none. */
static void test_speculation_fields(void **state) {
    (void)state;
    expect_error("{\"prompt\": \"x\", \"speculate\": \"fast\"}", PROMPT_KINDS, REQ_ERR_VALUE, "speculate", NULL);
    expect_error("{\"prompt\": \"x\", \"speculate\": true}", PROMPT_KINDS, REQ_ERR_TYPE, "speculate", NULL);
    expect_error("{\"prompt\": \"x\", \"spec_tokens\": 0}", PROMPT_KINDS, REQ_ERR_VALUE, "spec_tokens", NULL);
    expect_error("{\"prompt\": \"x\", \"spec_tokens\": 17}", PROMPT_KINDS, REQ_ERR_VALUE, "spec_tokens", NULL);
    req_decoded d;
    expect_ok("{\"prompt\": \"x\", \"speculate\": \"ngram\", \"spec_tokens\": 6}", REQ_BATCH, &d);
    assert_int_equal(d.samp.speculate, INVAR_SPEC_NGRAM);
    assert_int_equal(d.samp.spec_tokens, 6);
    req_default_speculation(&d, INVAR_SPEC_DRAFT, 2); /* given: kept */
    assert_int_equal(d.samp.speculate, INVAR_SPEC_NGRAM);
    assert_int_equal(d.samp.spec_tokens, 6);
    req_decoded_free(&d);
    expect_ok("{\"prompt\": \"x\", \"speculate\": \"off\"}", REQ_COMPLETION, &d);
    req_default_speculation(&d, INVAR_SPEC_NGRAM, 3);
    assert_int_equal(d.samp.speculate, INVAR_SPEC_OFF);
    assert_int_equal(d.samp.spec_tokens, 3);
    req_decoded_free(&d);
    expect_ok("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", REQ_CHAT, &d);
    assert_int_equal(d.samp.speculate, INVAR_SPEC_OFF); /* off unless asked */
    req_default_speculation(&d, INVAR_SPEC_NGRAM, 0);
    assert_int_equal(d.samp.speculate, INVAR_SPEC_NGRAM);
    req_decoded_free(&d);
}

static void test_prompts(void **state) {
    (void)state;
    /* Token ids: batch takes them as the server does. */
    req_decoded b, c;
    expect_ok("{\"prompt\": [1, 2, 3, 4, 5]}", REQ_BATCH, &b);
    expect_ok("{\"prompt\": [1, 2, 3, 4, 5]}", REQ_COMPLETION, &c);
    assert_int_equal(b.prompts[0].n_ids, 5);
    assert_same_prompt(&b.prompts[0], &c.prompts[0]);
    req_decoded_free(&b);
    req_decoded_free(&c);
    /* parse_special false: plain text, in both. */
    expect_ok("{\"prompt\": \"<|im_start|>\", \"parse_special\": false}", REQ_BATCH, &b);
    expect_ok("{\"prompt\": \"<|im_start|>\", \"parse_special\": false}", REQ_COMPLETION, &c);
    assert_true(b.prompts[0].n_ids > 1);
    assert_same_prompt(&b.prompts[0], &c.prompts[0]);
    req_decoded_free(&b);
    req_decoded_free(&c);
    /* Several prompts: completions only. */
    expect_ok("{\"prompt\": [\"a\", [7, 8]]}", REQ_COMPLETION, &c);
    assert_int_equal(c.n_prompts, 2);
    assert_int_equal(c.prompts[1].n_ids, 2);
    req_decoded_free(&c);
    expect_error("{\"prompt\": [\"a\", \"b\"]}", 1u, REQ_ERR_TYPE, "prompt", NULL);
    expect_error("{\"prompt\": [[]]}", 2u, REQ_ERR_VALUE, "prompt", "empty token prompt");
    expect_error("{\"prompt\": []}", PROMPT_KINDS, REQ_ERR_TYPE, "prompt", NULL);
    expect_error("{\"prompt\": 5}", PROMPT_KINDS, REQ_ERR_TYPE, "prompt", NULL);
    expect_error("{\"prompt\": [1, 2, 99999999]}", PROMPT_KINDS, REQ_ERR_TYPE, "prompt", "n_vocab");
    expect_error("{\"prompt\": [1, -1]}", PROMPT_KINDS, REQ_ERR_TYPE, "prompt", "n_vocab");
    char many[512] = "{\"prompt\": [";
    for (int i = 0; i <= REQ_MAX_PROMPTS; i++) strcat(many, i ? ", \"p\"" : "\"p\"");
    strcat(many, "]}");
    expect_error(many, 2u, REQ_ERR_VALUE, "prompt", "at most");
    /* Which of prompt / messages, and parse_special with them. */
    expect_error("{\"prompt\": \"x\", \"messages\": []}", ALL_KINDS, REQ_ERR_VALUE, "prompt", "not both");
    expect_error("{\"max_tokens\": 3}", 1u, REQ_ERR_MISSING, "prompt", NULL);
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 2u, REQ_ERR_MISSING, "prompt", NULL);
    expect_error("{\"prompt\": \"x\"}", 4u, REQ_ERR_MISSING, "messages", NULL);
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"parse_special\": false}", CHAT_KINDS,
                 REQ_ERR_VALUE, "parse_special", NULL);
    expect_error("{\"prompt\": \"x\", \"parse_special\": 1}", PROMPT_KINDS, REQ_ERR_VALUE, "parse_special", NULL);
    expect_error("[1, 2]", ALL_KINDS, REQ_ERR_TYPE, NULL, "JSON object");
    /* A prompt with no tokens. */
    int32_t id;
    if (invar_tokenize(g_model, "", 0, true, true, &id, 1) == 0)
        expect_error("{\"prompt\": \"\"}", PROMPT_KINDS, REQ_ERR_VALUE, "prompt", "empty");
}

static void test_parse_json_whole(void **state) {
    (void)state;
    bool trailing;
    cJSON *o = req_parse_json("{\"a\": 1} \t\r\n", 12, &trailing);
    assert_non_null(o);
    assert_false(trailing);
    cJSON_Delete(o);
    assert_null(req_parse_json("{\"a\": 1} x", 10, &trailing));
    assert_true(trailing);
    assert_null(req_parse_json("{\"a\": ", 6, &trailing));
    assert_false(trailing);
}

/* A field no one reads is an error naming it, never ignored. */
static void test_unknown_fields(void **state) {
    (void)state;
    expect_error("{\"prompt\": \"x\", \"unknown\": [1]}", PROMPT_KINDS, REQ_ERR_UNSUPPORTED, "unknown", "unknown");
    expect_error("{\"prompt\": \"x\", \"suffix\": \"y\"}", PROMPT_KINDS, REQ_ERR_UNSUPPORTED, "suffix", "suffix");
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": []}", CHAT_KINDS,
                 REQ_ERR_UNSUPPORTED, "tools", NULL);
    expect_error("{\"prompt\": \"x\", \"echo\": true}", 1u, REQ_ERR_UNSUPPORTED, "echo", NULL); /* batch */
    expect_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"name\": \"bob\"}]}", CHAT_KINDS,
                 REQ_ERR_UNSUPPORTED, "messages", "'name'");
    req_decoded d;
    expect_ok("{\"prompt\": \"x\", \"id\": 7}", REQ_BATCH, &d);
    req_decoded_free(&d);
    expect_ok("{\"prompt\": \"x\", \"echo\": true, \"n\": 1, \"user\": \"u\"}", REQ_COMPLETION, &d);
    req_decoded_free(&d);
}

/* seed: an unsigned 64-bit integer from its digits. */
static void test_seed_exact(void **state) {
    (void)state;
    static const struct {
        const char *json;
        uint64_t seed;
    } ok[] = {{"{\"prompt\": \"x\", \"seed\": 9007199254740993}", 9007199254740993ull},
              {"{\"prompt\": \"x\", \"seed\": 9007199254740992}", 9007199254740992ull},
              {"{\"prompt\": \"x\", \"seed\" : 18446744073709551615}", 18446744073709551615ull},
              {"{\"x\": {\"seed\": 5}, \"prompt\": \"x\", \"seed\": 0}", 0}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        for (int k = 0; k < 2; k++) {
            req_decoded d;
            req_error e;
            if (strstr(ok[i].json, "\"x\": {")) { /* unknown field: only the raw scan is under test */
                bool trailing;
                cJSON *o = req_parse_json(ok[i].json, strlen(ok[i].json), &trailing);
                assert_true(cJSON_IsRaw(cJSON_GetObjectItem(o, "seed")));
                assert_string_equal(cJSON_GetObjectItem(o, "seed")->valuestring, "0");
                cJSON_Delete(o);
                continue;
            }
            if (decode(ok[i].json, KINDS[k], &d, &e)) fail_msg("%s: %s", ok[i].json, e.message);
            assert_true(d.samp.seed == ok[i].seed);
            req_decoded_free(&d);
        }
    const char *bad[] = {"{\"prompt\": \"x\", \"seed\": 18446744073709551616}", "{\"prompt\": \"x\", \"seed\": -1}",
                         "{\"prompt\": \"x\", \"seed\": 1.5}", "{\"prompt\": \"x\", \"seed\": \"1\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_error(bad[i], PROMPT_KINDS, i >= 2 ? REQ_ERR_TYPE : REQ_ERR_VALUE, "seed", NULL);
}

static void test_processing_fields(void **state) {
    (void)state;
    req_decoded d;
    expect_ok("{\"prompt\": \"x\", \"presence_penalty\": 0.5, \"frequency_penalty\": -1, \"repetition_penalty\": 1.3,"
              " \"min_tokens\": 100, \"stop_token_ids\": [2, 7], \"logit_bias\": {\"5\": -100, \"9\": 2.5}}",
              REQ_BATCH, &d);
    assert_true(d.samp.presence_penalty == 0.5f && d.samp.frequency_penalty == -1.0f);
    assert_true(d.samp.repetition_penalty == 1.3f);
    assert_int_equal(d.samp.min_tokens, 100);
    assert_int_equal(d.samp.max_tokens, 100); /* the default length grows to min_tokens */
    assert_int_equal(d.samp.n_stop_token_ids, 2);
    assert_int_equal(d.samp.stop_token_ids[1], 7);
    assert_int_equal(d.samp.n_logit_bias, 2);
    assert_int_equal(d.samp.logit_bias[1].token, 9);
    assert_true(d.samp.logit_bias[1].bias == 2.5f);
    req_decoded_free(&d);
    static const struct {
        const char *json;
        req_error_kind kind;
        const char *param;
    } bad[] = {
        {"{\"prompt\": \"x\", \"logit_bias\": {\"-1\": 1}}", REQ_ERR_VALUE, "logit_bias"},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"49152\": 1}}", REQ_ERR_VALUE, "logit_bias"},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"abc\": 1}}", REQ_ERR_VALUE, "logit_bias"},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"1x\": 1}}", REQ_ERR_VALUE, "logit_bias"},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"1\": 101}}", REQ_ERR_VALUE, "logit_bias"},
        {"{\"prompt\": \"x\", \"logit_bias\": {\"1\": \"a\"}}", REQ_ERR_TYPE, "logit_bias"},
        {"{\"prompt\": \"x\", \"logit_bias\": [1]}", REQ_ERR_TYPE, "logit_bias"},
        {"{\"prompt\": \"x\", \"presence_penalty\": 2.5}", REQ_ERR_VALUE, "presence_penalty"},
        {"{\"prompt\": \"x\", \"frequency_penalty\": \"1\"}", REQ_ERR_TYPE, "frequency_penalty"},
        {"{\"prompt\": \"x\", \"repetition_penalty\": 0}", REQ_ERR_VALUE, "repetition_penalty"},
        {"{\"prompt\": \"x\", \"min_tokens\": 5, \"max_tokens\": 4}", REQ_ERR_VALUE, "min_tokens"},
        {"{\"prompt\": \"x\", \"stop_token_ids\": [49152]}", REQ_ERR_VALUE, "stop_token_ids"},
        {"{\"prompt\": \"x\", \"stop_token_ids\": 3}", REQ_ERR_TYPE, "stop_token_ids"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_error(bad[i].json, PROMPT_KINDS, bad[i].kind, bad[i].param, NULL);
}

/* The developer role is the system role. */
static void test_developer_role(void **state) {
    (void)state;
    req_decoded a, b;
    expect_ok("{\"messages\": [{\"role\": \"developer\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
              "\"content\": \"Hi\"}]}",
              REQ_CHAT, &a);
    expect_ok("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
              "\"Hi\"}]}",
              REQ_CHAT, &b);
    assert_same_prompt(&a.prompts[0], &b.prompts[0]);
    req_decoded_free(&a);
    req_decoded_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_and_server_decode_alike),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_message_content),
        cmocka_unit_test(test_sampling_ranges),
        cmocka_unit_test(test_speculation_fields),
        cmocka_unit_test(test_prompts),
        cmocka_unit_test(test_parse_json_whole),
        cmocka_unit_test(test_unknown_fields),
        cmocka_unit_test(test_seed_exact),
        cmocka_unit_test(test_processing_fields),
        cmocka_unit_test(test_developer_role),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
