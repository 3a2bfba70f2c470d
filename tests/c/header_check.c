/*
 * Compiled by .ci/c.sh as C99 and as C++ (same file) with -Wall -Wextra -Werror -pedantic:
 * include/postbox.h must be clean in both languages, and its types usable as written here.
 */
#include "postbox.h"

static int use_everything(void) {
    postbox_store_options so;
    postbox_queue_options qo;
    postbox_send_options mo;
    postbox_processor_options po;
    postbox_store_options_init(&so);
    postbox_queue_options_init(&qo);
    postbox_send_options_init(&mo);
    postbox_processor_options_init(&po);
    postbox_queue_counts qc;
    postbox_queue_counts_init(&qc);
    postbox_filter fi;
    postbox_filter_init(&fi);
    postbox_topic_stats ts;
    postbox_topic_stats_init(&ts);
    postbox_topic *topic = 0;
    postbox_collator *collator = 0;
    postbox_series_gaps *gaps = 0;
    postbox_session *session = 0;
    postbox_bytes b = postbox_message_body(0);
    postbox_stats s;
    postbox_commit_stats cs;
    postbox_processor_counters pc;
    postbox_shutdown_report r;
    postbox_property p;
    postbox_send_item item;
    postbox_handler h = 0;
    postbox_tx_handler th = 0;
    (void)s;
    (void)qc;
    (void)cs;
    (void)pc;
    (void)r;
    (void)p;
    (void)item;
    (void)h;
    (void)th;
    (void)fi;
    (void)ts;
    (void)topic;
    (void)collator;
    (void)gaps;
    (void)session;
    po.sessions = 1;
    qo.forward_to = "elsewhere";
    qo.forward_dead_letters_to = 0;
    qo.journal_max_messages = 10;
    qo.requires_session = 1;
    const char *reasons[] = {POSTBOX_REASON_TTL_EXPIRED, POSTBOX_REASON_MAX_DELIVERIES,
                             POSTBOX_REASON_DECODE_FAILED, "q" POSTBOX_DEAD_LETTER_SUFFIX,
                             POSTBOX_SERIES_LENGTH_PROPERTY, POSTBOX_SERIES_LAST_PROPERTY};
    qo.clear = POSTBOX_OPTION_LOCK_DURATION | POSTBOX_OPTION_MAX_DELIVERIES |
               POSTBOX_OPTION_DEFAULT_TTL | POSTBOX_OPTION_MAX_MESSAGE_SIZE |
               POSTBOX_OPTION_MAX_MESSAGES | POSTBOX_OPTION_MAX_BYTES | POSTBOX_OPTION_DEDUP_WINDOW |
               POSTBOX_OPTION_FORWARD_TO | POSTBOX_OPTION_FORWARD_DEAD_LETTERS_TO |
               POSTBOX_OPTION_JOURNAL;
    size_t bounds = POSTBOX_MAX_TEXT_PROPERTY_LEN + POSTBOX_MAX_PROPERTY_KEY_LEN +
                    POSTBOX_MAX_REASON_LEN + POSTBOX_MAX_DESCRIPTION_LEN;
    return (int)b.len + POSTBOX_OK + POSTBOX_CODEC + POSTBOX_QUEUE_NOT_FOUND + POSTBOX_FORKED + POSTBOX_IN_USE +
           (int)POSTBOX_VERSION_NUMBER + (int)POSTBOX_DURABILITY_NONE +
           (int)POSTBOX_PROPERTY_BYTES + (int)qo.clear + (int)bounds + (reasons[0][0] == 'T') +
           po.sessions + qo.requires_session;
}

int main(void) { return use_everything() == 0 ? 1 : 0; }
