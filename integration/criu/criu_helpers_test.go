package criu

// The restore log line of cryo's CRIU patch (contrib/criu): a CRIU whose
// log lacks it is stock.
const hugeFillLog = "huge-page fill: "
