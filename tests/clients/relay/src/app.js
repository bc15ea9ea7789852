// Documents a Relay app over mediagraph would hold: paginated lists both ways, refetchable
// Nodes, and subscriptions whose pushes update the store by id. relay-compiler compiles them
// in tests/test_clients.py; refetch.js beside them is generated from the schema's Node types.
import { graphql } from "relay-runtime";

export const mediaListFragment = graphql`
  fragment app_mediaList on Query
  @argumentDefinitions(
    first: { type: "Int", defaultValue: 10 }
    after: { type: "String" }
    last: { type: "Int" }
    before: { type: "String" }
    tags: { type: "[String!]" }
  )
  @refetchable(queryName: "MediaListPaginationQuery") {
    mediaList(first: $first, after: $after, last: $last, before: $before, tags: $tags)
      @connection(key: "app_mediaList_mediaList", filters: ["tags"]) {
      edges {
        node {
          id
          title
          contentUrl
          viewCount
          likeCount
          viewerHasLiked
          uploader {
            id
            nickname
          }
        }
      }
    }
  }
`;

export const rankedMediaFragment = graphql`
  fragment app_rankedMedia on Query
  @argumentDefinitions(
    first: { type: "Int", defaultValue: 2 }
    after: { type: "String" }
    tags: { type: "[String!]" }
  )
  @refetchable(queryName: "RankedMediaPaginationQuery") {
    mediaList(sort: VIEWS, tags: $tags, first: $first, after: $after)
      @connection(key: "app_rankedMedia_mediaList", filters: ["sort", "tags"]) {
      edges {
        node {
          id
          title
          viewCount
        }
      }
      omitted {
        id
        title
        viewCount
      }
      keptOmitted {
        id
        title
      }
    }
  }
`;

export const threadFragment = graphql`
  fragment app_thread on Media
  @argumentDefinitions(
    first: { type: "Int" }
    after: { type: "String" }
    last: { type: "Int", defaultValue: 20 }
    before: { type: "String" }
  )
  @refetchable(queryName: "ThreadPaginationQuery") {
    id
    commentCount
    comments(first: $first, after: $after, last: $last, before: $before) @connection(key: "app_thread_comments") {
      edges {
        node {
          id
          depth
          deleted
          content
          writerNickname
          createdAt
        }
      }
    }
  }
`;

export const newsfeedFragment = graphql`
  fragment app_newsfeed on Query
  @argumentDefinitions(
    first: { type: "Int", defaultValue: 10 }
    after: { type: "String" }
    last: { type: "Int" }
    before: { type: "String" }
  )
  @refetchable(queryName: "NewsfeedPaginationQuery") {
    newsfeed(first: $first, after: $after, last: $last, before: $before) @connection(key: "app_newsfeed_newsfeed") {
      edges {
        node {
          id
          text
          createdAt
          author {
            id
            nickname
          }
          media {
            id
            contentUrl
          }
        }
      }
    }
  }
`;

export const leaderboardFragment = graphql`
  fragment app_leaderboard on Leaderboard
  @argumentDefinitions(
    first: { type: "Int", defaultValue: 10 }
    after: { type: "String" }
    last: { type: "Int" }
    before: { type: "String" }
  )
  @refetchable(queryName: "LeaderboardPaginationQuery") {
    id
    name
    periodKey
    entryCount
    top(first: $first, after: $after, last: $last, before: $before) @connection(key: "app_leaderboard_top") {
      totalCount
      edges {
        node {
          id
          rank
          score
          user {
            id
            nickname
          }
        }
      }
    }
  }
`;

export const mediaPageQuery = graphql`
  query appMediaPageQuery($id: ID!, $board: String!) {
    media(id: $id) {
      id
      title
      viewCount
      ...app_thread
      liveViewers {
        id
        viewers
      }
    }
    leaderboard(name: $board) {
      ...app_leaderboard
    }
    ...app_mediaList
  }
`;

export const rankedQuery = graphql`
  query appRankedQuery {
    ...app_rankedMedia
  }
`;

export const viewCountSubscription = graphql`
  subscription appViewCountSubscription($id: ID!) {
    viewCount(mediaId: $id) {
      media {
        id
        viewCount
      }
    }
  }
`;

export const liveViewersSubscription = graphql`
  subscription appLiveViewersSubscription($id: ID!) {
    liveViewersUpdated(mediaId: $id) {
      id
      viewers
    }
  }
`;

export const leaderboardSubscription = graphql`
  subscription appLeaderboardSubscription($board: String!) {
    leaderboardTop(name: $board, first: 10) {
      entries {
        id
        rank
        score
      }
      leaderboard {
        id
        entryCount
      }
    }
  }
`;

export const likeMutation = graphql`
  mutation appLikeMutation($id: ID!) {
    likeMedia(mediaId: $id) {
      id
      likeCount
      viewerHasLiked
    }
  }
`;
