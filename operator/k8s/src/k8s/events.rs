//! Events as the API server takes them: shared by the controllers and the
//! webhook, which both publish decisions a person may need to see.

/// The most an Event's note may hold (the API server refuses a longer one,
/// and the Event is lost).
pub const EVENT_NOTE_LIMIT: usize = 1024;

/// `note` cut to [`EVENT_NOTE_LIMIT`] bytes on a character boundary, ending
/// in `…` when cut: a long refusal (every field of a pod's shape) still
/// reaches `kubectl describe`, and the status keeps the whole message.
pub fn event_note(mut note: String) -> String {
    if note.len() <= EVENT_NOTE_LIMIT {
        return note;
    }
    let mut end = EVENT_NOTE_LIMIT - '…'.len_utf8();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note.truncate(end);
    note.push('…');
    note
}
